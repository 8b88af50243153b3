// Node capacity in the backend against the simulator (docs/design.md#node-capacity):
// admission from the last listing, the check on Create's own fresh listing
// before it clones, an offline zone, the startup check of the offerings,
// `onboot` of stopped VMs of others, Delete giving room back, and no API
// call a Create did not make before.

import assert from "node:assert/strict";
import type { Offering } from "../../src/config/offerings.ts";
import type { InstanceType } from "../../src/config/types.ts";
import { createProxmoxBackend } from "../../src/proxmox/mod.ts";
import { DEFAULT_TEMPLATE, FAST, logLines, rig, signal, slot } from "./helpers.ts";

const ISSUE_NODE = { pve1: { memoryMib: 24105, cpus: 8 } };
const HALF: InstanceType = { name: "half", vcpu: 4, memoryMib: 12052, template: DEFAULT_TEMPLATE };
const BIG: InstanceType = { name: "big", vcpu: 8, memoryMib: 25129, template: DEFAULT_TEMPLATE };
const SMALL: InstanceType = { name: "small", vcpu: 2, memoryMib: 4096, template: DEFAULT_TEMPLATE };

function offering(instanceType: string, zone: string): Offering {
  return { instanceType, zone, count: 2, resources: [], labels: [] };
}

const catalog = new Map([HALF, BIG, SMALL].map((t) => [t.name, t]));
const offered = [offering("half", "pve1"), offering("small", "pve1"), offering("small", "pve2")];
const spec = (type: InstanceType, zone: string) =>
  slot(zone, {
    instanceType: type.name,
    machineId: `proxmox/OnDemand/${type.name}/${zone}/${crypto.randomUUID().slice(0, 8)}`,
  });
const clonePosts = (r: { sim: { requests: { method: string; path: string }[] } }) =>
  r.sim.requests.filter((q) => q.method === "POST" && q.path.endsWith("/clone")).length;

Deno.test("Create checks its own fresh listing before it clones: a VM of someone else started since admission fails it, nothing cloned", async () => {
  await using r = await rig({ nodeResources: ISSUE_NODE }, {}, {}, { catalog, offerings: offered });
  const s = spec(HALF, "pve1");
  assert.equal(r.backend.admit!(s), null, "room at admission");
  // A guest holding 60% of the node starts after the admission.
  r.sim.addVm({ vmid: 500, name: "foreign", template: false, running: true, memory: 14463 });
  const vms = r.sim.vms().length;
  await assert.rejects(
    r.backend.create(s, signal()),
    /^BackendError: zone pve1: node pve1 has no room for half: it needs 12052 MiB and 4 vCPUs, 7594 MiB and \d+ vCPUs free .*; nothing was cloned$/,
  );
  assert.equal(clonePosts(r), 0);
  assert.equal(r.sim.vms().length, vms, "no VM made");
  // Its room is given back: stopped (once pvestatd says so), the foreign VM leaves room and
  // the same Create succeeds.
  r.sim.stopVmOutOfBand(500);
  for (let i = 0; r.backend.admit!(s) !== null; i++) {
    assert.ok(i < 100, "the stop never showed in the listing");
    await new Promise((f) => setTimeout(f, 20));
    await r.backend.describe(signal());
  }
  const { hostRef } = await r.backend.create(s, signal());
  assert.match(hostRef, /^pve1\//);
});

Deno.test("a zone whose node is offline: admission refuses it once listed; a Create on an older listing fails before cloning", async () => {
  await using r = await rig({ nodes: ["pve1", "pve2"] }, {}, {}, { catalog, offerings: offered });
  r.sim.cutNode("pve2", "daemons");
  // Admission still has the startup listing (pve2 online): the Create's own listing refuses.
  const s = spec(SMALL, "pve2");
  assert.equal(r.backend.admit!(s), null);
  await assert.rejects(
    r.backend.create(s, signal()),
    /^BackendError: zone pve2: node pve2 is offline in the cluster: nothing is cloned there until it is back; nothing was cloned$/,
  );
  assert.equal(clonePosts(r), 0);
  assert.ok(!r.sim.vms().some((vm) => vm.node === "pve2" && !vm.foreign), "no VM on pve2");
  // That listing is the room's now: the next Create there is refused at admission.
  assert.equal(
    r.backend.admit!(spec(SMALL, "pve2")),
    "zone pve2: node pve2 is offline in the cluster: nothing is cloned there until it is back",
  );
  // Back in the cluster: a Create in its zone lands on it.
  r.sim.rejoinNode("pve2");
  await r.backend.describe(signal());
  const back = spec(SMALL, "pve2");
  for (let i = 0; r.backend.admit!(back) !== null; i++) {
    assert.ok(i < 100, "pve2 never became usable again");
    await new Promise((f) => setTimeout(f, 50));
    await r.backend.describe(signal());
  }
  assert.match((await r.backend.create(back, signal())).hostRef, /^pve2\//);
});

Deno.test("startup: a type no node it is offered on can hold stops the backend in one line; a pair that never fits one node is a WARN", async () => {
  await assert.rejects(
    rig({ nodeResources: ISSUE_NODE }, { nodes: ["pve1"] }, {}, {
      catalog,
      offerings: [offering("big", "pve1")],
    }),
    (e: Error) => {
      assert.equal(
        e.message,
        "instance type big fits none of the nodes it is offered on (pve1): big needs 25129 MiB " +
          "and 8 vCPUs and node pve1 can give at most 22057 MiB and 32 vCPUs to guests (24105 " +
          "MiB, 8 CPUs; memory (physical − 2048 MiB) × 1, vCPUs × 4); make it smaller, or offer " +
          "it on a larger node, or change --proxmox-memory-reserve / --proxmox-memory-overcommit",
      );
      return true;
    },
  );
  const warned = logLines.length;
  await using r = await rig({ nodeResources: ISSUE_NODE }, {}, {}, {
    catalog,
    offerings: [offering("big", "pve1"), offering("big", "pve2")],
  });
  assert.ok(
    logLines.slice(warned).some((l) =>
      l.startsWith("warning instance type") && l.includes('"type":"big","zone":"pve1"')
    ),
    logLines.slice(warned).join("\n"),
  );
  assert.match(r.backend.admit!(spec(BIG, "pve1")) ?? "", /big needs 25129 MiB/);
  assert.equal(r.backend.admit!(spec(BIG, "pve2")), null);
});

Deno.test("describe reads onboot of stopped VMs of others once per pass; one that starts on its own counts", async () => {
  await using r = await rig({ nodeResources: ISSUE_NODE }, {}, {}, { catalog, offerings: offered });
  r.sim.addVm({
    vmid: 501,
    name: "autostart",
    template: false,
    memory: 14463,
    config: { onboot: 1 },
  });
  r.sim.addVm({ vmid: 502, name: "spare", template: false, memory: 14463 });
  r.sim.addVm({ vmid: 503, name: "ha", template: false, memory: 1024, hastate: "started" });
  const before = r.sim.requests.length;
  await r.backend.describe(signal());
  const reads = r.sim.requests.slice(before).filter((q) => /\/qemu\/50\d\/config$/.test(q.path));
  // The HA one counts without a read; the template is never read.
  assert.deepEqual(reads.map((q) => q.path).sort(), [
    "/nodes/pve1/qemu/501/config",
    "/nodes/pve1/qemu/502/config",
  ]);
  const pve1 = r.backend.room!().find((z) => z.zone === "pve1")!;
  assert.equal(pve1.memoryMib.held, 14463 + 1024);
  assert.match(r.backend.admit!(spec(HALF, "pve1")) ?? "", /has no room for half/);
});

Deno.test("Delete gives the room back at once; the room report counts what fits", async () => {
  await using r = await rig({ nodeResources: ISSUE_NODE }, {}, {}, { catalog, offerings: offered });
  const a = spec(HALF, "pve1");
  assert.equal(r.backend.admit!(a), null);
  const { hostRef } = await r.backend.create(a, signal());
  assert.match(r.backend.admit!(spec(HALF, "pve1")) ?? "", /has no room for half/);
  assert.equal(r.backend.room!().find((z) => z.zone === "pve1")!.fits.half, 0);
  await r.backend.delete({ machineId: a.machineId, hostRef }, signal());
  const pve1 = r.backend.room!().find((z) => z.zone === "pve1")!;
  assert.deepEqual(pve1.fits, { half: 1, small: 5 });
  assert.equal(pve1.memoryMib.free, 22057);
  assert.equal(r.backend.admit!(spec(HALF, "pve1")), null);
});

Deno.test("a Create makes no API call it did not make before: the room is read from its adoption search", async () => {
  await using r = await rig({}, {}, {}, { catalog, offerings: offered });
  const s = spec(SMALL, "pve1");
  const before = r.sim.requests.length;
  assert.equal(r.backend.admit!(s), null);
  assert.equal(r.sim.requests.length, before, "admission asks nothing");
  await r.backend.create(s, signal());
  const paths = r.sim.requests.slice(before).map((q) => `${q.method} ${q.path}`);
  const count = (p: string) => paths.filter((x) => x === p).length;
  // The adoption search's listing and node list (where the room is read from), and the
  // template lookup's listing: the same calls a Create made before it checked any room.
  assert.equal(count("GET /cluster/resources"), 2, paths.join("\n"));
  assert.equal(count("GET /nodes"), 1, paths.join("\n"));
  assert.ok(!paths.some((p) => /\/nodes\/[^/]+\/status$/.test(p)), "no node status read");
});

Deno.test("a backend restarted while its node is full counts its own VMs whatever their state", async () => {
  await using r = await rig({ nodeResources: ISSUE_NODE }, {}, {}, { catalog, offerings: offered });
  const { hostRef } = await r.backend.create(spec(HALF, "pve1"), signal());
  r.sim.stopVmOutOfBand(Number(hostRef.split("/")[1]));
  const fresh = await createProxmoxBackend(r.cfg, { timing: FAST });
  try {
    await fresh.describe(signal());
    assert.match(fresh.admit!(spec(HALF, "pve1")) ?? "", /has no room for half/);
  } finally {
    await fresh.close();
  }
});
