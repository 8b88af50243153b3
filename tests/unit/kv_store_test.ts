import assert from "node:assert/strict";
import { openKvStore } from "../../src/kit/kv_store.ts";
import { State } from "../../src/kit/model.ts";
import type { MachineRecord } from "../../src/kit/model.ts";

function machine(id: string, extra: Partial<MachineRecord> = {}): MachineRecord {
  return {
    id,
    state: State.Configured,
    hostRef: "pve-a/101",
    instanceType: "pve.large",
    zone: "pve-a",
    capacityType: 3,
    pricePerHour: 0.0368,
    interruptionProbability: 0,
    resources: [["cpu", "1"], ["memory", "2Gi"]],
    allocatable: [["cpu", "8"], ["memory", "16Gi"]],
    labels: [],
    cluster: "c1",
    shardMetadata: [],
    lastError: "",
    ops: { create: "op-1", configure: "op-2" },
    orphan: false,
    ...extra,
  };
}

async function withStore(fn: (path: string) => Promise<void>) {
  const dir = await Deno.makeTempDir();
  try {
    await fn(`${dir}/state.kv`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("kv store: empty store loads as null", () =>
  withStore(async (path) => {
    const s = await openKvStore(path);
    assert.equal(await s.load(), null);
    await s.close();
  }));

Deno.test("kv store: records, fences and revision round-trip exactly", () =>
  withStore(async (path) => {
    const tricky: [string, string][] = [
      ["__proto__", "polluted?"],
      ["constructor", ""],
      ["x-key-with-nul\u0000suffix", "v\u0000\u0001\u0002\u001f\u007f"],
      ["ctl", "\u0085 \u00a0 你好🚀\t\n"],
      ["empty", ""],
    ];
    const s = await openKvStore(path);
    s.putMachine(machine("m/1", { shardMetadata: tricky }));
    s.putMachine(machine("m/2", { state: State.Speculative, hostRef: "", cluster: "" }));
    s.putFence({
      shardId: "s\u0000x",
      machineId: "m/1",
      mark: { epoch: 2n ** 63n - 1n, seq: -(2n ** 63n) },
    });
    s.putFence({ shardId: "", machineId: "ghost", mark: { epoch: 0n, seq: 5n } });
    s.putRevision(1795978308312);
    await s.durable();
    await s.close();

    const r = await openKvStore(path);
    const loaded = (await r.load())!;
    await r.close();
    assert.equal(loaded.rev, 1795978308312);
    const m1 = loaded.machines.find((m) => m.id === "m/1")!;
    assert.deepEqual(m1, machine("m/1", { shardMetadata: tricky }));
    assert.equal(loaded.machines.length, 2);
    const f = loaded.fences.find((f) => f.machineId === "m/1")!;
    assert.equal(f.shardId, "s\u0000x");
    assert.equal(f.mark.epoch, 2n ** 63n - 1n);
    assert.equal(f.mark.seq, -(2n ** 63n));
  }));

Deno.test("kv store: a record larger than one KV value is chunked and replaced cleanly", () =>
  withStore(async (path) => {
    const big: [string, string][] = [];
    for (let i = 0; i < 256; i++) {
      big.push([`x-oversize/key-${String(i).padStart(4, "0")}`, "v".repeat(8192)]);
    }
    const s = await openKvStore(path);
    s.putMachine(machine("big", { shardMetadata: big }));
    await s.durable();
    // Replace with a different big record, then a small one: old chunks must go.
    const big2 = big.map(([k, v]) => [k, v.toUpperCase()] as [string, string]);
    s.putMachine(machine("big", { shardMetadata: big2 }));
    await s.durable();
    await s.close();

    let r = await openKvStore(path);
    assert.deepEqual((await r.load())!.machines[0].shardMetadata, big2);
    r.putMachine(machine("big"));
    await r.durable();
    await r.close();

    const kv = await Deno.openKv(path);
    let chunks = 0;
    for await (const _ of kv.list({ prefix: ["mc"] })) chunks++;
    kv.close();
    assert.equal(chunks, 0, "superseded chunks are deleted");

    r = await openKvStore(path);
    assert.deepEqual((await r.load())!.machines[0].shardMetadata, []);
    await r.close();
  }));

Deno.test("kv store: chunks of an interrupted write are ignored and removed at load", () =>
  withStore(async (path) => {
    const s = await openKvStore(path);
    s.putMachine(machine("m"));
    await s.durable();
    await s.close();
    const kv = await Deno.openKv(path);
    await kv.set(["mc", "m", "dead-generation", 0], new Uint8Array(10));
    kv.close();
    const r = await openKvStore(path);
    assert.deepEqual((await r.load())!.machines[0], machine("m"));
    await r.close();
    const kv2 = await Deno.openKv(path);
    let chunks = 0;
    for await (const _ of kv2.list({ prefix: ["mc"] })) chunks++;
    kv2.close();
    assert.equal(chunks, 0);
  }));

Deno.test("kv store: many writes in one tick coalesce and all land", () =>
  withStore(async (path) => {
    const s = await openKvStore(path);
    for (let i = 0; i < 3000; i++) s.putMachine(machine(`m/${i}`));
    s.putRevision(3000);
    await s.durable();
    await s.close();
    const r = await openKvStore(path);
    const loaded = (await r.load())!;
    await r.close();
    assert.equal(loaded.machines.length, 3000);
    assert.equal(loaded.rev, 3000);
  }));
