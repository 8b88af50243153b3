// Create is idempotent on the machine id; VMID races are retried.

import assert from "node:assert/strict";
import { createProxmoxBackend } from "../../src/proxmox/mod.ts";
import type { SimFaults } from "../pvesim/mod.ts";
import { FAST, rig, signal, slot, vmidOf } from "./helpers.ts";
import { waitFor } from "../server/helpers.ts";

const clonePosts = (r: { sim: { requests: { method: string; path: string }[] } }) =>
  r.sim.requests.filter((q) => q.method === "POST" && q.path.endsWith("/clone")).length;

Deno.test("a repeated create adopts the existing VM instead of cloning again", async () => {
  await using r = await rig();
  const s = slot("pve2");
  const first = await r.backend.create(s, signal());
  r.sim.stopVmOutOfBand(vmidOf(first.hostRef));
  const again = await r.backend.create({ ...s, operationId: "op-retry" }, signal());
  assert.equal(again.hostRef, first.hostRef);
  assert.equal(clonePosts(r), 1);
  assert.equal(r.sim.vm(vmidOf(first.hostRef))!.status, "running", "adoption starts it again");
});

Deno.test("concurrent creates of one machine in one process make one VM", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const refs = await Promise.all([1, 2, 3].map(() => r.backend.create(s, signal())));
  assert.equal(new Set(refs.map((x) => x.hostRef)).size, 1);
  assert.equal(clonePosts(r), 1);
});

Deno.test("a second process adopts a clone still in flight (lock: clone, no name yet)", async () => {
  await using r = await rig({ timing: { cloneMs: 700, cloneNamelessMs: 350 } });
  const s = slot("pve2");
  const first = r.backend.create(s, signal());
  // Wait until the clone's temporary {lock: clone} config exists.
  await waitFor("the clone's lock", () => r.sim.vms().some((v) => v.lock === "clone") || undefined);
  const other = await createProxmoxBackend(r.cfg, { timing: FAST });
  try {
    const [a, b] = await Promise.all([first, other.create(s, signal())]);
    assert.equal(a.hostRef, b.hostRef);
  } finally {
    await other.close();
  }
  assert.equal(clonePosts(r), 1);
  assert.equal(r.sim.vms().filter((v) => !v.template).length, 1);
});

Deno.test("concurrent creates of different machines never collide on a VMID", async () => {
  await using r = await rig();
  const slots = Array.from({ length: 6 }, (_, i) => slot(i % 2 ? "pve1" : "pve2"));
  const refs = await Promise.all(slots.map((s) => r.backend.create(s, signal())));
  assert.equal(new Set(refs.map((x) => vmidOf(x.hostRef))).size, 6);
  assert.equal(clonePosts(r), 6, "no clone lost a race");
  const vms = await r.backend.describe(signal());
  assert.deepEqual(vms.map((v) => v.machineId).sort(), slots.map((s) => s.machineId).sort());
});

for (
  const kind of [
    "config-exists",
    "lock-timeout",
    "other-node",
    "sync",
  ] as SimFaults["nextidRaceKind"][]
) {
  Deno.test(`a lost VMID race (${kind}) is retried with a new id`, async () => {
    await using r = await rig();
    r.sim.faults.nextidRace = 2;
    r.sim.faults.nextidRaceKind = kind;
    const s = slot("pve1");
    const { hostRef } = await r.backend.create(s, signal());
    const vm = r.sim.vm(vmidOf(hostRef))!;
    assert.equal(vm.foreign, false);
    assert.match(String(vm.config.description), /bigfleet-marker/);
    assert.equal(clonePosts(r), 3);
    assert.ok(r.observed.every((o) => o.outcome === "ok"));
  });
}

Deno.test("a clone ending 'WARNINGS: 1' is a success", async () => {
  await using r = await rig();
  r.sim.faults.cloneWarnings = true;
  const { hostRef } = await r.backend.create(slot("pve1"), signal());
  assert.equal(r.sim.vm(vmidOf(hostRef))!.status, "running");
  assert.ok(r.sim.tasks().some((t) => t.exitstatus === "WARNINGS: 1"));
});

Deno.test("a failed clone task surfaces the task's own error text", async () => {
  await using r = await rig();
  r.sim.faults.taskError = { qmclone: "storage 'local-lvm' is full" };
  await assert.rejects(
    r.backend.create(slot("pve1"), signal()),
    /clone of template 9000 into VM \d+ failed: clone failed: storage 'local-lvm' is full/,
  );
  assert.deepEqual(r.observed.map((o) => `${o.op}:${o.outcome}`), ["CloneVM:error"]);
});

Deno.test("a template without a guest agent fails before any clone", async () => {
  await using r = await rig({
    templates: [{ vmid: 9000, name: "tmpl", agent: null, template: true }],
  });
  await assert.rejects(
    r.backend.create(slot("pve1"), signal()),
    /does not enable the QEMU guest agent/,
  );
  assert.equal(clonePosts(r), 0);
});

Deno.test("describe reports our in-flight clone as cloning, and ignores a stranger's", async () => {
  await using r = await rig({ timing: { cloneMs: 800, cloneNamelessMs: 300 } });
  const s = slot("pve1");
  const pending = r.backend.create(s, signal());
  await waitFor("the clone's lock", () => r.sim.vms().some((v) => v.lock === "clone") || undefined);
  const during = await r.backend.describe(signal());
  assert.equal(during.length, 1);
  assert.equal(during[0].machineId, s.machineId);
  assert.equal(during[0].cloning, true);
  const { hostRef } = await pending;
  const after = await r.backend.describe(signal());
  assert.deepEqual(after.map((v) => [v.machineId, v.hostRef, v.cloning]), [[
    s.machineId,
    hostRef,
    false,
  ]]);
  // A second process does not know the nameless clone is ours... until the marker lands.
  const other = await createProxmoxBackend(r.cfg, { timing: FAST });
  try {
    const p2 = r.backend.create(slot("pve1"), signal());
    await waitFor(
      "a nameless clone",
      () =>
        r.sim.vms().some((v) => v.lock === "clone" && v.config.name === undefined) ||
        undefined,
    );
    assert.equal(
      (await other.describe(signal())).length,
      1,
      "nameless foreign-looking clone skipped",
    );
    await p2;
    assert.equal((await other.describe(signal())).length, 2);
  } finally {
    await other.close();
  }
});
