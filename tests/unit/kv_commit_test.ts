// Commit splitting (src/store/kv_commit.ts): a run of mutations spread over
// atomic commits within KV's limits, its tail together in the last one.

import assert from "node:assert/strict";
import { commitAll, deletion, fitsOneCommit, mutation } from "../../src/store/kv_commit.ts";
import { kvFaults } from "../chaos/faulty_kv.ts";
import { withStore } from "./kv_fixtures.ts";

Deno.test("commit splitting: many mutations span commits, the tail lands whole in the last", () =>
  withStore(async (path) => {
    const faults = kvFaults();
    const kv = faults.wrap(await Deno.openKv(path));
    try {
      // 1,200 small sets (over the count limit) and 20 of 50 KB (over the size limit).
      const ops = [
        ...Array.from({ length: 1200 }, (_, i) => mutation(["small", i], i)),
        ...Array.from({ length: 20 }, (_, i) => mutation(["big", i], new Uint8Array(50_000))),
      ];
      const tail = [mutation(["meta", "a"], 1), mutation(["meta", "b"], 2), deletion(["small", 0])];
      await commitAll(kv, ops, tail);
      assert.ok(faults.commits.length >= 4, `${faults.commits.length} commits`);
      for (const c of faults.commits) {
        assert.ok(c.sets.length + c.deletes.length <= 1000, "KV's mutation limit");
      }
      const last = faults.commits.at(-1)!;
      const tailIn = (c: typeof last) => c.sets.some((k) => k[0] === "meta");
      assert.ok(tailIn(last), "the tail is in the last commit");
      assert.equal(faults.commits.filter(tailIn).length, 1, "and in no other");
      assert.deepEqual(last.deletes, [["small", 0]]);
      assert.equal((await kv.get(["small", 1199])).value, 1199);
      assert.equal((await kv.get(["small", 0])).versionstamp, null);
      assert.equal((await kv.get(["meta", "b"])).value, 2);
    } finally {
      kv.close();
    }
  }));

Deno.test("commit splitting: a run that fits is one commit; sizes count a value's bytes", () =>
  withStore(async (path) => {
    assert.ok(fitsOneCommit(Array.from({ length: 500 }, (_, i) => mutation(["k", i], i))));
    assert.ok(!fitsOneCommit(Array.from({ length: 501 }, (_, i) => mutation(["k", i], i))));
    const record = { j: new Uint8Array(55_000) };
    assert.ok(mutation(["o", 0, "m"], record).size > 55_000, "bytes under an object count");
    assert.ok(!fitsOneCommit(Array.from({ length: 11 }, (_, i) => mutation(["o", i], record))));

    const faults = kvFaults();
    const kv = faults.wrap(await Deno.openKv(path));
    try {
      await commitAll(kv, [mutation(["a"], 1), mutation(["b"], 2)], [mutation(["t"], 3)]);
      assert.equal(faults.commits.length, 1);
      await commitAll(kv, []);
      assert.equal(faults.commits.length, 1, "nothing to write, no commit");
    } finally {
      kv.close();
    }
  }));
