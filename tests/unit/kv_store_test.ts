import assert from "node:assert/strict";
import { openKvStore } from "../../src/store/kv_store.ts";
import { State } from "../../src/kit/model.ts";
import type { MachineRecord } from "../../src/kit/model.ts";
import { byId, has, keys, machine, reload, withStore } from "./kv_fixtures.ts";
import { encodeRecord } from "../../src/store/record_codec.ts";
import { FULL_DISK, isKey, kvFaults } from "../chaos/faulty_kv.ts";
import type { KvFaults } from "../chaos/faulty_kv.ts";
import { waitFor } from "../harness/time.ts";

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

    const loaded = (await reload(path))!;
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
    const loaded = (await reload(path))!;
    assert.equal(loaded.machines.length, 3000);
    assert.equal(loaded.rev, 3000);
  }));

// ---- One writer per state file.

Deno.test("kv store: a second store on the same path is refused, naming this process", () =>
  withStore(async (path) => {
    const s = await openKvStore(path);
    await assert.rejects(
      openKvStore(path),
      (e: Error) =>
        e.message.startsWith(`--state ${JSON.stringify(path)}: in use by another provider: `) &&
        e.message.includes(`pid ${Deno.pid} on host ${Deno.hostname()} since `),
    );
    await s.close();
    const again = await openKvStore(path);
    await again.close();
  }));

// ---- All or nothing: batches cut short by a failing disk (as by a crash: the
// store is closed without committing and reopened).

function fleet(n: number, gen: number, extra: Partial<MachineRecord> = {}): MachineRecord[] {
  return Array.from(
    { length: n },
    (_, i) => machine(`m/${i}`, { shardMetadata: [["gen", String(gen)]], ...extra }),
  );
}

/** Opens, writes `ms` and the revision in one tick, and closes: the store is left as the faults allow. */
async function writeBatch(
  path: string,
  ms: MachineRecord[],
  rev: number,
  faults = kvFaults(),
): Promise<boolean> {
  const s = await openKvStore(path, { wrapKv: faults.wrap });
  await s.load();
  for (const m of ms) s.putMachine(m);
  s.putRevision(rev);
  const ok = await s.durable().then(() => true, () => false);
  await s.close();
  return ok;
}

/** Fails every commit after the one that sets the redo marker. */
function failAfterRedoMark(): KvFaults {
  const faults = kvFaults();
  let marked = false;
  faults.failWhen = (c) => {
    if (marked) return true;
    marked = c.sets.some((k) => isKey(k, "meta", "redo"));
    return false;
  };
  return faults;
}

Deno.test("kv store: a first batch cut short at any commit loads as empty, and nothing of it is left", async () => {
  // How many commits the first batch of a fresh file takes (a packed base: pages, then its pointer).
  let commits = 0;
  await withStore(async (path) => {
    const faults = kvFaults();
    assert.ok(await writeBatch(path, fleet(3000, 1), 1, faults));
    commits = faults.commits.length;
  });
  assert.ok(commits >= 2, `the first batch takes ${commits} commits`);
  for (let failAt = 0; failAt < commits; failAt++) {
    await withStore(async (path) => {
      const faults = kvFaults();
      faults.failWhen = () => faults.commits.length >= failAt;
      assert.equal(await writeBatch(path, fleet(3000, 1), 1, faults), false);
      if (failAt > 0) {
        assert.ok((await keys(path)).length > 0, "some commits of the batch did land");
      }

      const s = await openKvStore(path);
      assert.equal(await s.load(), null, `cut at commit ${failAt}`);
      await s.close();
      assert.deepEqual(await keys(path), []);
    });
  }
});

Deno.test("kv store: a first state is written as a packed base, whole or not at all", async () => {
  const state = {
    machines: fleet(3000, 1),
    fences: [{ shardId: "s", machineId: "m/1", mark: { epoch: 1n, seq: 2n } }],
    rev: 9,
  };
  let commits = 0;
  await withStore(async (path) => {
    const faults = kvFaults();
    const s = await openKvStore(path, { wrapKv: faults.wrap });
    assert.equal(await s.load(), null);
    s.handFirst(state);
    await s.durable();
    await s.close();
    commits = faults.commits.length;
    assert.ok(await has(path, ["meta", "base"]), "a base is in use");
    assert.deepEqual(await keys(path, ["o"]), [], "no overlay key per machine");
    const loaded = (await reload(path))!;
    assert.equal(loaded.rev, 9);
    assert.deepEqual(loaded.machines.sort(byId), state.machines.sort(byId));
    assert.deepEqual(loaded.fences, state.fences);
  });
  assert.ok(commits >= 2, `the first state takes ${commits} commits`);
  // Cut at each of those commits: a restart finds the file never written.
  for (let failAt = 0; failAt < commits; failAt++) {
    await withStore(async (path) => {
      const faults = kvFaults();
      faults.failWhen = () => faults.commits.length >= failAt;
      const s = await openKvStore(path, { wrapKv: faults.wrap });
      assert.equal(await s.load(), null);
      s.handFirst(state);
      await assert.rejects(s.durable(), new RegExp(FULL_DISK));
      await s.close();
      assert.equal(await reload(path), null, `cut at commit ${failAt}`);
      assert.deepEqual(await keys(path), []);
    });
  }
});

Deno.test("kv store: a first state is refused on a file that holds one", () =>
  withStore(async (path) => {
    assert.ok(await writeBatch(path, [machine("a")], 1));
    const s = await openKvStore(path);
    assert.ok(await s.load());
    assert.throws(
      () => s.handFirst({ machines: [machine("b")], fences: [], rev: 2 }),
      /only to a never-written file/,
    );
    await s.close();
    assert.deepEqual((await reload(path))!.machines.map((m) => m.id), ["a"]);
  }));

Deno.test("kv store: a batch over one commit is durable from its redo marker on", () =>
  withStore(async (path) => {
    assert.ok(await writeBatch(path, fleet(3000, 1), 1));
    const faults = failAfterRedoMark();
    assert.equal(await writeBatch(path, fleet(3000, 2), 2, faults), false);
    assert.ok(faults.refused > 0, "the apply was cut short");

    const loaded = (await reload(path))!;
    assert.equal(loaded.rev, 2);
    assert.deepEqual(loaded.machines.sort(byId), fleet(3000, 2).sort(byId));
    assert.deepEqual(await keys(path, ["redo"]), [], "staged parts are removed");
    assert.equal(await has(path, ["meta", "redo"]), false, "the marker is removed");
  }));

Deno.test("kv store: a write before load() still finishes a marked batch first", () =>
  withStore(async (path) => {
    assert.ok(await writeBatch(path, fleet(3000, 1), 1));
    assert.equal(await writeBatch(path, fleet(3000, 2), 2, failAfterRedoMark()), false);

    const s = await openKvStore(path);
    s.putMachine(machine("m/0", { shardMetadata: [["gen", "3"]] }));
    s.putRevision(3);
    await s.durable();
    await s.close();

    const loaded = (await reload(path))!;
    assert.equal(loaded.rev, 3);
    const want = fleet(3000, 2);
    want[0] = machine("m/0", { shardMetadata: [["gen", "3"]] });
    assert.deepEqual(loaded.machines.sort(byId), want.sort(byId));
  }));

Deno.test("kv store: a batch cut short before its redo marker leaves the previous state", () =>
  withStore(async (path) => {
    assert.ok(await writeBatch(path, fleet(3000, 1), 1));
    const faults = kvFaults();
    faults.failWhen = (c) => c.sets.some((k) => isKey(k, "meta", "redo"));
    assert.equal(await writeBatch(path, fleet(3000, 2), 2, faults), false);
    assert.ok(faults.commits.length > 0, "some staged parts did land");

    const loaded = (await reload(path))!;
    assert.equal(loaded.rev, 1);
    assert.deepEqual(loaded.machines.sort(byId), fleet(3000, 1).sort(byId));
    assert.deepEqual(await keys(path, ["redo"]), []);
  }));

Deno.test("kv store: a retry that fits one commit replaces a failed attempt's redo marker", () =>
  withStore(async (path) => {
    const big = (id: string) => machine(id, { lastError: "x".repeat(55_000) });
    const small = (id: string) => machine(id, { lastError: "small" });
    const ids = Array.from({ length: 12 }, (_, i) => `m/${i}`);
    assert.ok(await writeBatch(path, ids.map(small), 1));

    const faults = failAfterRedoMark();
    const s = await openKvStore(path, { wrapKv: faults.wrap });
    await s.load();
    for (const id of ids) s.putMachine(big(id)); // 660 KB: over one commit by size
    s.putRevision(2);
    await assert.rejects(s.durable(), new RegExp(FULL_DISK));
    // Before the retry: the same machines again, now small enough for one commit.
    for (const id of ids) s.putMachine(small(id));
    s.putRevision(3);
    faults.failWhen = undefined;
    faults.failing = false;
    await s.durable();
    await s.close();

    const loaded = (await reload(path))!;
    assert.equal(loaded.rev, 3);
    assert.deepEqual(loaded.machines.sort(byId), ids.map(small).sort(byId));
  }));

Deno.test("kv store: a failing disk is reported, the change kept and committed on recovery", () =>
  withStore(async (path) => {
    const faults = kvFaults();
    const s = await openKvStore(path, { wrapKv: faults.wrap });
    await s.load();
    s.putMachine(machine("a"));
    await s.durable();
    assert.equal(s.failure, null);

    faults.failing = true;
    s.putMachine(machine("b"));
    await assert.rejects(s.durable(), new RegExp(FULL_DISK));
    assert.equal(s.failure, FULL_DISK);
    assert.ok(s.committedCount < s.handedCount, "b is not committed");

    faults.failing = false;
    await waitFor("the store to recover", () => s.failure === null);
    assert.equal(s.committedCount, s.handedCount);
    await s.close();

    const r = await openKvStore(path);
    assert.deepEqual((await r.load())!.machines.map((m) => m.id).sort(), ["a", "b"]);
    await r.close();
  }));

Deno.test("kv store: close gives up on a failing disk instead of retrying forever", () =>
  withStore(async (path) => {
    const faults = kvFaults();
    const s = await openKvStore(path, { wrapKv: faults.wrap });
    await s.load();
    faults.failing = true;
    s.putMachine(machine("lost"));
    await s.close();
    // Released: the state opens again, without the change.
    const r = await openKvStore(path);
    assert.equal(await r.load(), null);
    await r.close();
  }));

Deno.test("kv store: a store written before the format marker existed still loads", () =>
  withStore(async (path) => {
    const kv = await Deno.openKv(path);
    await kv.set(["m", "old"], { j: encodeRecord(machine("old")) });
    await kv.set(["meta", "rev"], 42);
    kv.close();
    const loaded = (await reload(path))!;
    assert.equal(loaded.rev, 42);
    assert.deepEqual(loaded.machines, [machine("old")]);
    assert.ok(await has(path, ["meta", "format"]), "the marker is added");
  }));

// ---- Chunked records and recovery.

Deno.test("kv store: a retried chunked record rewrites the same chunks", () =>
  withStore(async (path) => {
    assert.ok(await writeBatch(path, [machine("small")], 1));
    const faults = kvFaults();
    let refusedOnce = false;
    // The chunks land; the commit pointing the machine at them fails once.
    faults.failWhen = (c) => {
      if (refusedOnce || !c.sets.some((k) => k[0] === "o")) return false;
      refusedOnce = true;
      return true;
    };
    const s = await openKvStore(path, { wrapKv: faults.wrap });
    await s.load();
    const big = machine("big", { lastError: "x".repeat(150_000) });
    s.putMachine(big);
    await assert.rejects(s.durable(), new RegExp(FULL_DISK));
    faults.failing = false;
    await waitFor("the retry", () => s.committedCount === s.handedCount && s.failure === null);
    const chunkIds = new Set((await keys(path, ["mc", "big"])).map((k) => k[2]));
    await s.close();
    assert.equal(chunkIds.size, 1, "one chunk id across the attempts");
    assert.deepEqual((await reload(path))!.machines.find((m) => m.id === "big"), big);
  }));

Deno.test("kv store: after a packing cut short, writes go to the newest generation", () =>
  withStore(async (path) => {
    assert.ok(await writeBatch(path, [machine("m/0", { lastError: "v1" })], 1));
    // As a crash leaves it after a packing sealed generation 0 and a commit
    // landed in generation 1, before the new base's pointer.
    const kv = await Deno.openKv(path);
    await kv.set(["o", 1, "m/0"], { j: encodeRecord(machine("m/0", { lastError: "v2" })) });
    kv.close();
    const s = await openKvStore(path);
    assert.equal((await s.load())!.machines[0].lastError, "v2");
    s.putMachine(machine("m/0", { lastError: "v3" }));
    await s.durable();
    await s.close();
    assert.equal((await reload(path))!.machines[0].lastError, "v3", "the newer write wins");
  }));

Deno.test("kv store: a new file's first batch waits for firstCommitAfter; later batches commit after it", () =>
  withStore(async (path) => {
    const faults = kvFaults();
    const listening = Promise.withResolvers<void>();
    let open = false;
    let early = 0;
    faults.failWhen = () => {
      if (!open) early++;
      return false;
    };
    const s = await openKvStore(path, { wrapKv: faults.wrap, firstCommitAfter: listening.promise });
    assert.equal(await s.load(), null);
    s.putMachine(machine("a"));
    s.putRevision(1);
    const first = s.durable();
    // Held: a third of a second is long enough for an unheld commit to land many times over.
    const held = await Promise.race([
      first.then(() => "committed"),
      new Promise((r) => setTimeout(() => r("held"), 300)),
    ]);
    assert.equal(held, "held");
    open = true;
    listening.resolve();
    await first;
    s.putMachine(machine("b"));
    await s.durable();
    await s.close();
    assert.equal(early, 0, "no commit was tried before the wait was over");
    assert.deepEqual((await reload(path))!.machines.map((m) => m.id).sort(), ["a", "b"]);
  }));

Deno.test("kv store: closing a new file whose first batch still waits commits it", () =>
  withStore(async (path) => {
    const never = new Promise<void>(() => {});
    const s = await openKvStore(path, { firstCommitAfter: never });
    assert.equal(await s.load(), null);
    s.putMachine(machine("a"));
    s.putRevision(1);
    await s.close();
    assert.deepEqual((await reload(path))!.machines.map((m) => m.id), ["a"]);
  }));

Deno.test("kv store: a handed first state whose commit failed lands with the changes handed after it over it", () =>
  withStore(async (path) => {
    const faults = kvFaults();
    faults.failWhen = () => true;
    const s = await openKvStore(path, { wrapKv: faults.wrap });
    assert.equal(await s.load(), null);
    s.handFirst({ machines: [machine("a"), machine("b"), machine("c")], fences: [], rev: 4 });
    await assert.rejects(s.durable(), new RegExp(FULL_DISK));
    // Handed after the failure: the retry holds the first state behind these.
    s.putMachine(machine("a", { state: State.Failed, lastError: "create failed: x" }));
    s.deleteMachine("b");
    s.putRevision(5);
    faults.failing = false;
    faults.failWhen = undefined;
    await s.durable();
    await s.close();
    const loaded = (await reload(path))!;
    assert.equal(loaded.rev, 5);
    assert.deepEqual(
      loaded.machines.sort(byId).map((m) => [m.id, m.state]),
      [["a", State.Failed], ["c", State.Configured]],
    );
  }));
