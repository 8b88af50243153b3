// The kit writes a new fleet as the state store's first packed base, over
// several commits; a crash at any commit of it must leave either the whole
// first inventory or nothing (then the next start seeds again). Each trial
// fails the disk at one more commit, "crashes" (the store is abandoned), and
// reopens the file.

import assert from "node:assert/strict";
import { createFakeBackend } from "../../src/fake/backend.ts";
import { startKit } from "../../src/kit/kit.ts";
import { openKvStore } from "../../src/store/kv_store.ts";
import type { Slot } from "../../src/config/types.ts";
import { kvFaults } from "../chaos/faulty_kv.ts";

const N = 2_500;

const slots: Slot[] = Array.from({ length: N }, (_, i) => ({
  id: `t/OnDemand/pve.small/z-a/${String(i).padStart(4, "0")}`,
  instanceType: "pve.small",
  zone: "z-a",
  pricePerHour: 0.01,
  resources: [],
  allocatable: [["cpu", "2"], ["memory", "4Gi"]],
  labels: [],
}));

Deno.test("kit: a new fleet written as a packed base is whole or absent whichever commit fails", async () => {
  const seen = new Set<number>();
  for (let failAt = 1;; failAt++) {
    const dir = await Deno.makeTempDir();
    const path = `${dir}/state.kv`;
    try {
      const faults = kvFaults();
      faults.failWhen = () => faults.commits.length >= failAt;
      const store = await openKvStore(path, { wrapKv: faults.wrap });
      // The kit serves at once; the first state commits behind it.
      const booted = await startKit({
        provider: "t",
        backend: createFakeBackend({ delayMs: 0 }),
        store,
        slots,
      }).then(() => store.durable()).then(() => true, () => false);
      // A crash: whatever was not committed is lost.
      faults.failing = true;
      await store.close();

      const reopened = await openKvStore(path);
      const loaded = await reopened.load();
      await reopened.close();
      const count = loaded?.machines.length ?? 0;
      assert.ok(
        count === 0 || count === N,
        `disk failed at commit ${failAt}: ${count} of ${N} machines survived`,
      );
      seen.add(count);
      if (booted) break;
      assert.ok(failAt < 50, "the first write never completed");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  }
  // Both outcomes happened, so the failures landed inside the first write.
  assert.deepEqual([...seen].sort((a, b) => a - b), [0, N]);
});
