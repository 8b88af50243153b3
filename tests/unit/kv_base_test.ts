// The packed base of the Deno KV state store: a restart reads a few values
// instead of one per machine, and packing a new base never loses or revives
// anything, whenever it is cut short.

import assert from "node:assert/strict";
import { pollWithin } from "../../src/async/poll.ts";
import { openKvStore } from "../../src/store/kv_store.ts";
import { encodeRecord } from "../../src/store/record_codec.ts";
import type { MachineRecord } from "../../src/kit/model.ts";
import type { StateStore } from "../../src/kit/store.ts";
import { isKey, kvFaults } from "../chaos/faulty_kv.ts";
import type { KvFaults } from "../chaos/faulty_kv.ts";
import { byId, keys, machine, reload, withStore } from "./kv_fixtures.ts";

const fleet = (n: number, tag: string) =>
  Array.from({ length: n }, (_, i) => machine(`m/${i}`, { lastError: tag }));

/** Keys under a prefix, counted. */
async function count(path: string, prefix: Deno.KvKey): Promise<number> {
  return (await keys(path, prefix)).length;
}

/** The base the file points at, or null. */
async function baseRef(path: string): Promise<{ id: string; pages: number; gen: number } | null> {
  const kv = await Deno.openKv(path);
  const v = (await kv.get<{ id: string; pages: number; gen: number }>(["meta", "base"])).value;
  kv.close();
  return v;
}

/** Opens, loads, runs `fn`, waits for durability, closes. */
async function session(
  path: string,
  fn: (s: StateStore) => void,
  faults?: KvFaults,
): Promise<boolean> {
  const s = await openKvStore(path, faults ? { wrapKv: faults.wrap } : {});
  await s.load();
  fn(s);
  const ok = await s.durable().then(() => true, () => false);
  await s.close();
  return ok;
}

Deno.test("kv base: a first inventory is packed, and loads whole from a few values", () =>
  withStore(async (path) => {
    const want = fleet(3000, "first");
    assert.ok(
      await session(path, (s) => {
        for (const m of want) s.putMachine(m);
        s.putFence({ shardId: "s", machineId: "m/1", mark: { epoch: 2n ** 63n - 1n, seq: -5n } });
        s.putRevision(5);
      }),
    );
    const ref = await baseRef(path);
    assert.ok(ref, "a base is in use");
    assert.ok(ref.pages > 1 && ref.pages < 100, `${ref.pages} pages for 3000 machines`);
    assert.equal(await count(path, ["o"]), 0, "the overlay it replaced is gone");
    assert.equal(await count(path, ["of"]), 0);

    const loaded = (await reload(path))!;
    assert.equal(loaded.rev, 5);
    assert.deepEqual(loaded.machines.sort(byId), want.sort(byId));
    assert.deepEqual(loaded.fences, [
      { shardId: "s", machineId: "m/1", mark: { epoch: 2n ** 63n - 1n, seq: -5n } },
    ]);
  }));

Deno.test("kv base: changes after the base, deletions included, load over it", () =>
  withStore(async (path) => {
    assert.ok(await session(path, (s) => fleet(3000, "v1").forEach((m) => s.putMachine(m))));
    const before = await baseRef(path);
    assert.ok(
      await session(path, (s) => {
        s.putMachine(machine("m/7", { lastError: "v2" }));
        s.deleteMachine("m/8");
        s.putMachine(machine("new", { lastError: "v2" }));
        s.putRevision(9);
      }),
    );
    assert.deepEqual(await baseRef(path), before, "a few changes do not repack");
    assert.ok(await count(path, ["o"]) >= 3, "they are overlay keys");

    const want = fleet(3000, "v1").filter((m) => m.id !== "m/8");
    want[7] = machine("m/7", { lastError: "v2" });
    want.push(machine("new", { lastError: "v2" }));
    const loaded = (await reload(path))!;
    assert.deepEqual(loaded.machines.sort(byId), want.sort(byId));
  }));

Deno.test("kv base: an overlay of a quarter of the fleet is packed into a new base", () =>
  withStore(async (path) => {
    assert.ok(await session(path, (s) => fleet(4000, "v1").forEach((m) => s.putMachine(m))));
    const first = (await baseRef(path))!;
    const changed = fleet(1500, "v2");
    // One change per tick, as lifecycle calls come: the repack starts between commits.
    const s = await openKvStore(path);
    await s.load();
    for (const m of changed) {
      s.putMachine(m);
      await s.durable();
    }
    await s.close();
    const second = (await baseRef(path))!;
    assert.notEqual(second.id, first.id, "a new base");
    assert.ok(second.gen > first.gen);
    assert.equal(await count(path, ["b", first.id]), 0, "the old base is deleted");

    const want = [...changed, ...fleet(4000, "v1").slice(1500)];
    assert.deepEqual((await reload(path))!.machines.sort(byId), want.sort(byId));
  }));

Deno.test("kv base: a repack cut short at any commit leaves the state it started from", async () => {
  // Find how many commits a repack of this fleet takes, then fail each one in turn.
  let packCommits = 0;
  await withStore(async (path) => {
    assert.ok(await session(path, (s) => fleet(2000, "v1").forEach((m) => s.putMachine(m))));
    const faults = kvFaults();
    assert.ok(
      await session(path, (s) => fleet(2000, "v2").forEach((m) => s.putMachine(m)), faults),
    );
    packCommits = faults.commits.filter((c) => c.sets.some((k) => k[0] === "b")).length;
  });
  assert.ok(packCommits >= 2, `a repack takes ${packCommits} commits`);
  for (let failAt = 0; failAt < packCommits; failAt++) {
    await withStore(async (path) => {
      assert.ok(await session(path, (s) => fleet(2000, "v1").forEach((m) => s.putMachine(m))));
      const faults = kvFaults();
      let pages = 0;
      faults.failWhen = (c) => c.sets.some((k) => k[0] === "b") && pages++ === failAt;
      // The changes themselves commit (as a redo batch); the repack after them fails.
      assert.ok(
        await session(path, (s) => fleet(2000, "v2").forEach((m) => s.putMachine(m)), faults),
      );
      assert.ok(faults.refused > 0, `commit ${failAt} of the repack was refused`);
      const loaded = (await reload(path))!;
      assert.deepEqual(
        loaded.machines.sort(byId),
        fleet(2000, "v2").sort(byId),
        `repack cut at commit ${failAt}`,
      );
    });
  }
});

Deno.test("kv base: a crash after the new base, before the cleanup, loads the new state once", () =>
  withStore(async (path) => {
    assert.ok(await session(path, (s) => fleet(2000, "v1").forEach((m) => s.putMachine(m))));
    const faults = kvFaults();
    // Every commit after the one that points at the new base fails: the old
    // base and the sealed overlay stay on disk.
    let pointed = false;
    faults.failWhen = (c) => {
      if (pointed) return true;
      pointed = c.sets.some((k) => isKey(k, "meta", "base"));
      return false;
    };
    assert.ok(
      await session(path, (s) => fleet(2000, "v2").forEach((m) => s.putMachine(m)), faults),
    );
    assert.ok(await count(path, ["o"]) > 0, "the sealed overlay was not deleted");
    assert.ok(await count(path, ["b"]) > (await baseRef(path))!.pages, "nor the old base");

    const loaded = (await reload(path))!;
    assert.deepEqual(loaded.machines.sort(byId), fleet(2000, "v2").sort(byId));
    assert.equal(await count(path, ["o"]), 0, "stale generations are deleted at load");
    assert.equal(await count(path, ["b"]), (await baseRef(path))!.pages, "the old base too");
  }));

Deno.test("kv base: a file of per-record keys loads, and moves to a base", () =>
  withStore(async (path) => {
    // As a provider before packed bases wrote it.
    const kv = await Deno.openKv(path);
    const old = fleet(1200, "legacy");
    for (let i = 0; i < old.length; i += 400) {
      const op = kv.atomic();
      for (const m of old.slice(i, i + 400)) op.set(["m", m.id], { j: encodeRecord(m) });
      await op.commit();
    }
    await kv.atomic().set(["f", "s", "m/0"], { e: 1n, s: 2n }).set(["meta", "rev"], 4).set(
      ["meta", "format"],
      1,
    ).commit();
    kv.close();

    const s = await openKvStore(path);
    const loaded = (await s.load())!;
    assert.deepEqual(loaded.machines.sort(byId), [...old].sort(byId));
    s.putMachine(machine("m/0", { lastError: "after" }));
    await s.durable();
    await s.close();

    assert.ok(await baseRef(path), "a base now");
    assert.equal(await count(path, ["m"]), 0, "per-record keys are gone");
    assert.equal(await count(path, ["f"]), 0);
    const want = [machine("m/0", { lastError: "after" }), ...old.slice(1)];
    const again = (await reload(path))!;
    assert.deepEqual(again.machines.sort(byId), want.sort(byId));
    assert.deepEqual(again.fences, [{
      shardId: "s",
      machineId: "m/0",
      mark: { epoch: 1n, seq: 2n },
    }]);
    assert.equal(again.rev, 4);
  }));

Deno.test("kv base: a record larger than one value is packed across values", () =>
  withStore(async (path) => {
    const big: [string, string][] = Array.from(
      { length: 40 },
      (_, i) => [`k${i}`, "é".repeat(4000)],
    );
    const want: MachineRecord[] = [...fleet(1100, "v1"), machine("big", { shardMetadata: big })];
    assert.ok(await session(path, (s) => want.forEach((m) => s.putMachine(m))));
    assert.ok(await baseRef(path));
    assert.equal(await count(path, ["mc"]), 0, "no chunks outside the base");
    assert.deepEqual((await reload(path))!.machines.sort(byId), want.sort(byId));
  }));

Deno.test("kv base: a store written without loading never packs a partial state", () =>
  withStore(async (path) => {
    assert.ok(await session(path, (s) => fleet(2000, "v1").forEach((m) => s.putMachine(m))));
    const before = await baseRef(path);
    const s = await openKvStore(path);
    for (const m of fleet(1200, "v2")) s.putMachine(m);
    await s.durable();
    await s.close();
    assert.deepEqual(await baseRef(path), before);
    const want = [...fleet(1200, "v2"), ...fleet(2000, "v1").slice(1200)];
    assert.deepEqual((await reload(path))!.machines.sort(byId), want.sort(byId));
  }));

Deno.test("kv base: a store written before its load never packs what the load missed", () =>
  withStore(async (path) => {
    assert.ok(await session(path, (s) => fleet(2000, "v1").forEach((m) => s.putMachine(m))));
    const before = await baseRef(path);
    const s = await openKvStore(path);
    s.putMachine(machine("early", { lastError: "before load" }));
    await s.load();
    for (const m of fleet(1200, "v2")) s.putMachine(m);
    await s.durable();
    await s.close();
    assert.deepEqual(await baseRef(path), before, "no base packed from a partial view");
    const want = [
      machine("early", { lastError: "before load" }),
      ...fleet(1200, "v2"),
      ...fleet(2000, "v1").slice(1200),
    ];
    assert.deepEqual((await reload(path))!.machines.sort(byId), want.sort(byId));
  }));

Deno.test("kv base: a repack that fails is not retried after every commit", () =>
  withStore(async (path) => {
    assert.ok(await session(path, (s) => fleet(2000, "v1").forEach((m) => s.putMachine(m))));
    // Base pages are refused (a disk with room for small commits only); the rest goes through.
    const faults = kvFaults();
    let pageCommits = 0;
    faults.failWhen = (c) => {
      const page = c.sets.some((k) => k[0] === "b");
      if (page) pageCommits++;
      return page;
    };
    const s = await openKvStore(path, { wrapKv: faults.wrap });
    await s.load();
    const v2 = fleet(1200, "v2");
    v2.forEach((m) => s.putMachine(m));
    await s.durable();
    const tried = await pollWithin(
      AbortSignal.timeout(10_000),
      10,
      10_000,
      () => Promise.resolve(pageCommits > 0 ? true : undefined),
    );
    assert.ok(tried, "a repack was attempted");
    const extra = Array.from({ length: 5 }, (_, i) => machine(`x/${i}`));
    for (const m of extra) {
      faults.failing = false;
      s.putMachine(m);
      await s.durable();
    }
    await s.close();
    assert.equal(pageCommits, 1, "one attempt, not one per commit");
    const want = [...v2, ...fleet(2000, "v1").slice(1200), ...extra];
    assert.deepEqual((await reload(path))!.machines.sort(byId), want.sort(byId));
  }));

Deno.test("kv base: a file from a newer format is refused, not misread", () =>
  withStore(async (path) => {
    assert.ok(await session(path, (s) => s.putMachine(machine("a"))));
    const kv = await Deno.openKv(path);
    await kv.set(["meta", "format"], 3);
    kv.close();
    const s = await openKvStore(path);
    await assert.rejects(
      s.load(),
      /^Error: --state ".*": state format 3 was written by a newer provider; this one reads formats 1 to 2: /,
    );
    await s.close();
    const kv2 = await Deno.openKv(path);
    assert.equal((await kv2.get(["meta", "format"])).value, 3, "the file is left as it was");
    kv2.close();
  }));
