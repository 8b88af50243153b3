// Parallel clones to one storage queue on vdisk_alloc's storage lock and
// time out after 10 s (docs/proxmox-notes.md "Storage locks"): clone tasks
// are bounded per node and storage (per cluster on shared storage), a lock
// timeout made nothing and is retried, and the template's own config lock
// (taken shared with a 1 s timeout) is not a lost VMID race.

import assert from "node:assert/strict";
import type { Simulator } from "../pvesim/mod.ts";
import { logLines, rig, signal, slot, vmidOf } from "./helpers.ts";

type R = Awaited<ReturnType<typeof rig>>;

const LOCAL_TEMPLATE = {
  templates: [{
    vmid: 9000,
    node: "pve1",
    name: "tmpl-local",
    agent: "1",
    sharedStorage: false,
  }],
};

/** The most clone tasks running at once, per source node and in the cluster. */
function watchClones(sim: Simulator) {
  const peak: Record<string, number> = { cluster: 0 };
  const sample = () => {
    const running = sim.tasks().filter((t) => t.type === "qmclone" && t.status === "running");
    peak.cluster = Math.max(peak.cluster, running.length);
    for (const n of new Set(running.map((t) => t.node))) {
      peak[n] = Math.max(peak[n] ?? 0, running.filter((t) => t.node === n).length);
    }
  };
  sim.faults.onRequest = sample;
  return peak;
}

const ordinary = (r: R) => r.sim.vms().filter((v) => !v.template);
const failedClones = (r: R) =>
  r.sim.tasks().filter((t) => t.type === "qmclone" && t.exitstatus !== "OK");

Deno.test("clone tasks are bounded per node and storage: no Create meets a lock timeout", async () => {
  await using r = await rig({
    ...LOCAL_TEMPLATE,
    timing: { storageAllocMs: 150, storageLockTimeoutMs: 400, cloneMs: 250, cloneNamelessMs: 100 },
  });
  const peak = watchClones(r.sim);
  const made = await Promise.all(
    Array.from({ length: 6 }, () => r.backend.create(slot("pve1"), signal())),
  );
  assert.equal(new Set(made.map((m) => m.hostRef)).size, 6);
  assert.ok(peak.pve1 <= 2, `at most 2 clones at once: ${peak.pve1}`);
  assert.deepEqual(failedClones(r), []);
});

Deno.test("--proxmox-clones-per-storage sets the bound", async () => {
  await using r = await rig({ ...LOCAL_TEMPLATE }, { clonesPerStorage: 1 });
  const peak = watchClones(r.sim);
  await Promise.all(Array.from({ length: 3 }, () => r.backend.create(slot("pve1"), signal())));
  assert.equal(peak.pve1, 1);
});

Deno.test("on shared storage the bound is per cluster: its lock is the cluster's", async () => {
  await using r = await rig({ timing: { cloneMs: 250, cloneNamelessMs: 100 } });
  const peak = watchClones(r.sim);
  await Promise.all(
    ["pve1", "pve1", "pve2", "pve2"].map((z) => r.backend.create(slot(z), signal())),
  );
  assert.ok(peak.cluster <= 2, `at most 2 clones on ceph-vm at once: ${peak.cluster}`);
});

for (
  const [what, opts, storage] of [
    ["a node's flock on local storage", LOCAL_TEMPLATE, "local-lvm"],
    ["the cluster lock on shared storage", {}, "ceph-vm"],
  ] as const
) {
  Deno.test(`a storage lock timeout (${what}) is retried as nothing made`, async () => {
    await using r = await rig({ ...opts, timing: { storageLockTimeoutMs: 300 } });
    const held = r.sim.holdStorageLock(storage, 1200, "pve1");
    const s = slot("pve1");
    const { hostRef } = await r.backend.create(s, signal());
    await held;
    const failed = failedClones(r);
    assert.ok(failed.length >= 1, "the first clone met the lock");
    assert.match(failed[0].exitstatus!, /got (?:lock request )?timeout$/);
    assert.deepEqual(ordinary(r).map((v) => v.vmid), [vmidOf(hostRef)]);
  });
}

Deno.test("a half-made VM of ours left by a failed clone is removed before the retry", async () => {
  await using r = await rig({ timing: { storageLockTimeoutMs: 300 } });
  r.sim.faults.cloneCleanupFails = true;
  const held = r.sim.holdStorageLock("ceph-vm", 1200);
  const { hostRef } = await r.backend.create(slot("pve1"), signal());
  await held;
  assert.ok(failedClones(r).length >= 1);
  assert.deepEqual(ordinary(r).map((v) => v.vmid), [vmidOf(hostRef)], "one VM, no leftover");
});

Deno.test("the template's config lock timing out is waited out, not taken for a lost VMID race", async () => {
  await using r = await rig({ timing: { lockTimeoutMs: 100 } });
  // A `qm set` (or a migration) holds the template's config lock exclusively.
  const held = r.sim.holdConfigLock(9000, 1500);
  const s = slot("pve2");
  const { hostRef } = await r.backend.create(s, signal());
  await held;
  const texts = failedClones(r).map((t) => t.exitstatus);
  assert.ok(texts.length >= 1);
  for (const t of texts) {
    assert.equal(t, "can't lock file '/var/lock/qemu-server/lock-9000.conf' - got timeout");
  }
  assert.ok(!logLines.some((l) => /lost a VMID race/.test(l) && l.includes(`${vmidOf(hostRef)}`)));
  // The VMID it first chose was never given up.
  const first = r.sim.requests.find((q) => q.path.endsWith("/clone"))!;
  assert.equal(first.params?.newid, vmidOf(hostRef));
});
