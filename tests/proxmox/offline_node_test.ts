// One node of the cluster down (pveproxy answers 595/596 for it; the listing
// shows its VMs `unknown`): describe, startup and Create keep working for the
// rest of the cluster, and the outage is logged once.

import assert from "node:assert/strict";
import { builtinCatalog } from "../../src/config/catalog.ts";
import { createProxmoxBackend } from "../../src/proxmox/mod.ts";
import { buildDescription } from "../../src/proxmox/naming.ts";
import { Harness, MachineState, startProvider } from "../harness/mod.ts";
import { startSimulator } from "../pvesim/mod.ts";
import { sleep, waitFor } from "../server/helpers.ts";
import {
  FAST,
  listedGuest,
  logLines,
  providerArgs,
  providerRig,
  rig,
  signal,
  slot,
  vmidOf,
} from "./helpers.ts";

const toNode = (node: string) => (q: { path: string }) => q.path.startsWith(`/nodes/${node}/`);
const outageLines = (node: string) =>
  logLines.filter((l) => l.includes(`"node":"${node}"`) && /is unreachable/.test(l));

Deno.test("describe with a node down: no failed pass, its VMs from the listing, logged once", async () => {
  await using r = await rig();
  const a = slot("pve1");
  const b = slot("pve2");
  const va = await r.backend.create(a, signal());
  const vb = await r.backend.create(b, signal());
  await r.backend.describe(signal());

  r.sim.faults.offlineNodes = ["pve2"];
  const before = r.sim.requests.length;
  const logged = outageLines("pve2").length;
  for (let pass = 0; pass < 3; pass++) {
    const vms = await r.backend.describe(signal());
    const byId = new Map(vms.map((v) => [v.machineId, v]));
    assert.equal(byId.get(a.machineId)?.status, "running");
    assert.equal(byId.get(a.machineId)?.hostRef, va.hostRef);
    // The listing still has it; its marker was read before the outage.
    assert.equal(byId.get(b.machineId)?.hostRef, vb.hostRef);
    assert.equal(byId.get(b.machineId)?.status, "unknown");
  }
  assert.equal(
    r.sim.requests.slice(before).filter(toNode("pve2")).length,
    0,
    "a node the cluster reports offline is not asked",
  );
  assert.equal(outageLines("pve2").length, logged + 1, "the outage is logged once");

  r.sim.faults.offlineNodes = [];
  const back = await r.backend.describe(signal());
  assert.equal(back.find((v) => v.machineId === b.machineId)?.status, "running");
  assert.ok(logLines.some((l) => l.includes(`"node":"pve2"`) && /reachable again/.test(l)));
});

Deno.test("describe when a node's proxy fails but the cluster says online: one failed read per pass", async () => {
  await using r = await rig();
  const made = [];
  for (let i = 0; i < 3; i++) made.push(await r.backend.create(slot("pve2"), signal()));
  const keep = await r.backend.create(slot("pve1"), signal());
  r.sim.faults.http596.push({
    path: /^\/nodes\/pve2\//,
    count: 1000,
    status: 595,
    reason: "No route to host",
    performed: false,
  });
  const before = r.sim.requests.length;
  const vms = await r.backend.describe(signal());
  assert.ok(vms.some((v) => v.hostRef === keep.hostRef));
  for (const m of made) assert.equal(vms.find((v) => v.hostRef === m.hostRef)?.status, "unknown");
  // Reads run 8 at a time: at most the ones already in flight fail, none is retried.
  const toPve2 = r.sim.requests.slice(before).filter(toNode("pve2")).length;
  assert.ok(toPve2 >= 1 && toPve2 <= 3, `${toPve2} requests to pve2`);
});

Deno.test("a restarted backend with a node down describes the rest and does not guess", async () => {
  await using r = await rig();
  const a = slot("pve1");
  await r.backend.create(a, signal());
  await r.backend.create(slot("pve2"), signal());
  r.sim.faults.offlineNodes = ["pve2"];
  const fresh = await createProxmoxBackend(r.cfg, { timing: FAST });
  try {
    const vms = await fresh.describe(signal());
    // Only what can be identified: a VM never read cannot be named (it would become an orphan).
    assert.deepEqual(vms.map((v) => v.machineId), [a.machineId]);
  } finally {
    await fresh.close();
  }
});

Deno.test("Create does not wait on, or even ask, a node that is down", async () => {
  await using r = await rig();
  // A clone in flight on pve2 that could be anyone's: normally worth waiting for.
  r.sim.addVm({ vmid: 720, node: "pve2", name: "x", template: false });
  r.sim.editVmOutOfBand(720, (c) => {
    for (const k of Object.keys(c)) delete c[k];
    c.lock = "clone";
  });
  r.sim.faults.offlineNodes = ["pve2"];
  r.sim.faults.offlineReply = { status: 596, reason: "Connection timed out", delayMs: 300 };
  const before = r.sim.requests.length;
  const { hostRef } = await r.backend.create(slot("pve1"), AbortSignal.timeout(15_000));
  assert.match(hostRef, /^pve1\//);
  assert.equal(r.sim.requests.slice(before).filter(toNode("pve2")).length, 0);
});

Deno.test({
  name: "the provider process starts and serves with a node down",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const sim = await startSimulator({ nodes: ["pve1", "pve2"] });
    const dir = await Deno.makeTempDir({ prefix: "bf-offline-" });
    try {
      // A VM this provider made on pve2, before pve2 went down.
      const id = "pve-test/OnDemand/pve.small/pve2/000";
      sim.addVm({
        vmid: 130,
        node: "pve2",
        name: "bigfleet-x",
        template: false,
        tags: "bigfleet",
        description: buildDescription(id, "op-1"),
      });
      sim.faults.offlineNodes = ["pve2"];
      const tokenFile = `${dir}/token`;
      await Deno.writeTextFile(tokenFile, sim.tokenSecret);
      const p = await startProvider({ args: providerArgs(sim, tokenFile) });
      const h = new Harness(p.addr);
      try {
        const { machines } = await h.list({});
        assert.ok(machines.length > 0, "serving its inventory");
        assert.match(p.stderr(), /node pve2 is unreachable/);
      } finally {
        h.close();
        await p.stop();
      }
    } finally {
      await sim.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
});

/** The rig's simulator timings (rig() sets them unless `timing` is given). */
const QUICK = { cloneMs: 120, cloneNamelessMs: 40, taskMs: 20, agentBootMs: 80, execMs: 20 };

/** A provider process on three nodes, pve3 to be cut off: its first call there waits 1 s, then 595. */
async function threeNodes() {
  const r = await providerRig({
    nodes: ["pve1", "pve2", "pve3"],
    timing: { proxyTimeoutMs: 1_000, noRouteMs: 50, statusStaleMs: 1_500, rejoinUnknownMs: 500 },
  });
  const offerings = `${r.dir}/offerings.json`;
  await Deno.writeTextFile(
    offerings,
    JSON.stringify([
      { instance_type: "pve.small", zone: "pve1", count: 1 },
      { instance_type: "pve.small", zone: "pve3", count: 2 },
    ]),
  );
  const p = await r.start([
    "--nodes=pve1,pve2,pve3",
    `--offerings=${offerings}`,
    "--reconcile-interval=1s",
  ]);
  return { r, p, h: new Harness(p.addr) };
}

Deno.test({
  name:
    "a Delete that meets a node cut off waits for it within its timeout: the other machines there keep their state, and when the node rejoins the Delete ends SPECULATIVE with the VM gone and nothing orphaned",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const { r, p, h } = await threeNodes();
    await using _ = r;
    try {
      const speculative = (await h.list({})).machines.filter((m) =>
        m.state === MachineState.SPECULATIVE
      );
      const [gone, kept] = speculative.filter((m) => m.zone === "pve3").map((m) => m.id);
      const other = speculative.find((m) => m.zone === "pve1")!.id;
      for (const id of [gone, kept, other]) await h.create(id);
      for (const id of [gone, kept, other]) await h.mustReach(id, MachineState.IDLE, 30_000);
      const vmid = vmidOf((await h.get(gone)).host!.ref);
      assert.equal(r.sim.vm(vmid)?.node, "pve3");

      r.sim.cutNode("pve3", "link");
      await h.delete(gone);
      // Long past the first 595s: still waiting, not FAILED; the others keep their state.
      await waitFor(
        "the wait logged",
        () => p.stderr().includes("waits for node pve3") || undefined,
      );
      await sleep(3_000);
      assert.equal(
        (await h.get(gone)).state,
        MachineState.DELETING,
        (await h.get(gone)).last_error,
      );
      assert.equal((await h.get(kept)).state, MachineState.IDLE);
      assert.equal((await h.get(other)).state, MachineState.IDLE);
      assert.ok(r.sim.vm(vmid) !== undefined, "the VM could not be destroyed meanwhile");

      r.sim.rejoinNode("pve3");
      const done = await h.mustReach(gone, MachineState.SPECULATIVE, 60_000);
      assert.equal(done.last_error, "");
      assert.equal(r.sim.vm(vmid), undefined, "the VM is gone");
      const waits = p.stderr().split("\n").filter((l) => l.includes("waits for node pve3"));
      assert.equal(waits.length, 1, waits.join("\n"));
      // The provider's view and the cluster agree again: no orphan, each VM held by its machine.
      await waitFor(
        "a reconcile pass after the rejoin",
        () => p.stderr().includes("node pve3 is reachable again") || undefined,
        30_000,
      );
      const all = (await h.list({})).machines;
      assert.deepEqual(all.filter((m) => m.id.includes("/orphan/")), []);
      const held = all.filter((m) => m.host?.ref).map((m) => vmidOf(m.host!.ref)).sort();
      const vms = r.sim.vms().filter((v) => !v.template).map((v) => v.vmid).sort();
      assert.deepEqual(held, vms);
    } finally {
      h.close();
      await p.stop();
    }
  },
});

Deno.test("a Drain that meets a node cut off waits for it and completes when it rejoins in time", async () => {
  await using r = await rig({
    nodes: ["pve1", "pve2", "pve3"],
    timing: { ...QUICK, proxyTimeoutMs: 300, noRouteMs: 20 },
  }, { nodes: ["pve1", "pve2", "pve3"] });
  const s = slot("pve3");
  const { hostRef } = await r.backend.create(s, signal());
  r.sim.cutNode("pve3", "link");
  const from = logLines.length;
  const drained = r.backend.drain({ machineId: s.machineId, hostRef }, 30n, signal());
  await waitFor(
    "the wait logged",
    () => logLines.slice(from).some((l) => l.includes("waits for node pve3")) || undefined,
  );
  assert.equal(r.sim.vm(vmidOf(hostRef))!.drains.length, 0);
  r.sim.rejoinNode("pve3");
  await drained;
  assert.equal(
    r.sim.vm(vmidOf(hostRef))!.drains.length,
    1,
    "kubectl drain ran once the node was back",
  );
});

Deno.test("an offline node's stale, then bare, /cluster/resources entries: a restarted backend starts, describes no orphan and finds the other zones' templates; the offline zone's template is unreachable, not missing", async () => {
  const template = {
    kind: "per-zone" as const,
    vmids: new Map([["pve1", 9000], ["pve3", 9003]]),
  };
  const zones = (...z: string[]) =>
    z.map((zone) => ({ instanceType: "pve.small", zone, count: 1, resources: [], labels: [] }));
  await using r = await rig(
    {
      nodes: ["pve1", "pve2", "pve3"],
      templates: [
        { vmid: 9000, node: "pve1", name: "tmpl-1", tags: "bigfleet" },
        { vmid: 9003, node: "pve3", name: "tmpl-3", tags: "bigfleet", sharedStorage: false },
      ],
      timing: {
        ...QUICK,
        resourcesLagMs: 20,
        proxyTimeoutMs: 200,
        noRouteMs: 10,
        statusStaleMs: 800,
      },
    },
    { nodes: ["pve1", "pve2", "pve3"] },
    {},
    {
      catalog: builtinCatalog(template),
      template,
      offerings: zones("pve1", "pve3"),
    },
  );
  const s = slot("pve3");
  const { hostRef } = await r.backend.create(s, signal());
  r.sim.cutNode("pve3", "link");
  const vmsNow = async () => {
    const fresh = await createProxmoxBackend(r.cfg, { timing: FAST });
    try {
      return await fresh.describe(signal());
    } finally {
      await fresh.close();
    }
  };
  // Stale: the guest listed as it was; then bare: no name, no template flag.
  for (const phase of ["stale", "bare"]) {
    if (phase === "bare") await sleep(1_000);
    const guest = await listedGuest(r.sim, vmidOf(hostRef));
    const tmpl = await listedGuest(r.sim, 9003);
    if (phase === "stale") {
      assert.equal(guest?.status, "running");
      assert.equal(tmpl?.template, 1);
    } else {
      assert.deepEqual([guest?.status, "name" in guest!], ["unknown", false]);
      assert.deepEqual([tmpl?.status, "template" in tmpl!], ["unknown", false]);
    }
    // Started (the template check leaves the unreachable zone to Create) and no orphan.
    assert.deepEqual((await vmsNow()).map((v) => v.machineId), [], phase);
  }
  // The zone whose node is up still creates; the offline one's template is not "missing".
  const up = await r.backend.create(slot("pve1"), signal());
  assert.match(up.hostRef, /^pve1\//);
  const err = await r.backend.create(slot("pve3"), AbortSignal.timeout(5_000)).then(
    () => null,
    (e) => e as Error,
  );
  assert.ok(err !== null);
  assert.doesNotMatch(err.message, /not found on any node|no template/);
});

Deno.test("a clone into a VMID that lives on an offline node (200, then `close (rename) atomic file …: File exists`) is a lost VMID race: the Create takes a new VMID", async () => {
  await using r = await rig({
    nodes: ["pve1", "pve3"],
    timing: QUICK,
  }, { nodes: ["pve1"] });
  r.sim.cutNode("pve3", "daemons");
  // Someone else's VM appears in our newid on pve3 between nextid and the clone.
  r.sim.faults.nextidRace = 1;
  r.sim.faults.nextidRaceKind = "other-node";
  const { hostRef } = await r.backend.create(slot("pve1"), signal());
  const lost = r.sim.tasks().find((t) => t.type === "qmclone" && t.exitstatus !== "OK");
  assert.match(lost?.exitstatus ?? "", /^close \(rename\) atomic file '.*' failed: File exists$/);
  const foreign = r.sim.vms().find((v) => v.foreign)!;
  assert.equal(foreign.node, "pve3");
  assert.notEqual(vmidOf(hostRef), foreign.vmid);
  assert.match(hostRef, /^pve1\//);
});
