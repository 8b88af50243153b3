// Our own clone in its first phase shows only the temporary config clone_vm
// writes (`description: " qmclone temporary file"`, `lock: clone`, a digest;
// docs/proxmox-notes.md "VMID allocation and clone races"). Whenever Create
// cannot know such a clone is its own (a restart without state, a lost
// answer, an aborted wait), it waits for it rather than cloning a second VM:
// every path ends with exactly one VM per machine id.

import assert from "node:assert/strict";
import type { Config } from "../../src/config/types.ts";
import { createProxmoxBackend } from "../../src/proxmox/mod.ts";
import { waitFor } from "../server/helpers.ts";
import {
  FAST,
  listedGuest,
  logLines,
  rig,
  setupTokenAcl,
  signal,
  slot,
  vmidOf,
} from "./helpers.ts";

type R = Awaited<ReturnType<typeof rig>>;

const clonePosts = (r: R) =>
  r.sim.requests.filter((q) => q.method === "POST" && q.path.endsWith("/clone")).length;
const ordinary = (r: R) => r.sim.vms().filter((v) => !v.template);
/** The VMs carrying this machine's marker, or still in their temporary config. */
const vmsOf = (r: R, machineId: string) =>
  ordinary(r).filter((v) =>
    String(v.config.description ?? "").includes(machineId) ||
    v.config.description === " qmclone temporary file"
  );

/** Resolves once some clone shows the temporary config. */
const inTemporaryConfig = (r: R) =>
  waitFor(
    "a clone in its temporary config",
    () =>
      r.sim.vms().find((v) =>
        v.lock === "clone" && v.config.description === " qmclone temporary file"
      ) ?? undefined,
  );

const SLOW_FIRST_DISK = { timing: { cloneMs: 1400, cloneNamelessMs: 900 } };

/**
 * Create, kill the process while its clone is in the temporary config, and
 * Create again in a new process (on `after`, by default the same settings):
 * it must adopt that clone, with one clone POST in all. The clone's VMID.
 */
async function killAndRestart(
  r: R,
  after: () => Promise<Config> = () => Promise.resolve(r.cfg),
): Promise<number> {
  const s = slot("pve1");
  const before = new AbortController();
  const first = r.backend.create(s, before.signal).catch((e) => e);
  const temp = await inTemporaryConfig(r);
  // The first process dies: its memory of the clone goes with it.
  before.abort(new Error("provider killed"));
  await first;
  const restarted = await createProxmoxBackend(await after(), { timing: FAST });
  try {
    const { hostRef } = await restarted.create({ ...s, operationId: "op-after-restart" }, signal());
    assert.equal(vmidOf(hostRef), temp.vmid);
  } finally {
    await restarted.close();
  }
  assert.equal(clonePosts(r), 1);
  assert.deepEqual(vmsOf(r, s.machineId).map((v) => v.vmid), [temp.vmid]);
  return temp.vmid;
}

Deno.test("a provider restarted without state adopts its clone still in the temporary config", async () => {
  await using r = await rig(SLOW_FIRST_DISK);
  await killAndRestart(r);
});

Deno.test("a pool-only token: a provider restarted without state waits for its clone, out of sight until it joins the pool, and adopts it", async () => {
  await using r = await rig({
    timing: { ...SLOW_FIRST_DISK.timing, resourcesLagMs: 1000 },
    acl: await setupTokenAcl("--no-audit-all-vms"),
  });
  // A VMID used before: /cluster/resources lists an older name until pvestatd sees the clone's.
  r.sim.addVm({ vmid: 100, name: "gone-before", template: false, pool: "bigfleet" });
  r.sim.deleteVmOutOfBand(100);
  assert.equal(await killAndRestart(r), 100);
  assert.ok(logLines.some((l) => l.includes("does not follow is running; waiting")));
});

Deno.test("a pool-only token rotated while the provider was down: restarted with the old token second in its file, it sees the clone the old token started and adopts it", async () => {
  await using r = await rig({
    timing: SLOW_FIRST_DISK.timing,
    acl: await setupTokenAcl("--no-audit-all-vms"),
  });
  const dir = await Deno.makeTempDir({ prefix: "bf-rotated-" });
  try {
    await killAndRestart(r, async () => {
      // setup-token.sh --rotate --keep-old, and the token file as docs/credentials.md says.
      const B = "bigfleet@pve!autoscaler-r1";
      r.sim.addToken(B, "secret-r1");
      await Deno.writeTextFile(
        `${dir}/token`,
        `${B}=secret-r1\n${r.sim.tokenId}=${r.sim.tokenSecret}\n`,
      );
      const proxmox = {
        ...r.cfg.proxmox!,
        tokenId: B,
        tokenSecret: "secret-r1",
        tokenFile: `${dir}/token`,
      };
      return { ...r.cfg, proxmox };
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a pool-only token and a shared template on a node outside --nodes: a provider restarted without state waits for the clone running on the template's node and adopts it", async () => {
  await using r = await rig(
    {
      nodes: ["pve1", "pve2", "pve3"],
      templates: [{ vmid: 9000, node: "pve3", name: "tmpl-k8s", tags: "k8s;template" }],
      timing: SLOW_FIRST_DISK.timing,
      acl: await setupTokenAcl("--no-audit-all-vms"),
    },
    {},
    {},
    {
      offerings: [{ instanceType: "pve.small", zone: "pve1", count: 1, resources: [], labels: [] }],
    },
  );
  assert.deepEqual(r.cfg.proxmox!.nodes, ["pve1", "pve2"]);
  await killAndRestart(r);
  assert.ok(
    r.sim.tasks().filter((t) => t.type === "qmclone").every((t) => t.node === "pve3"),
    "clone tasks run on the template's node",
  );
});

Deno.test("a clone into a VMID a template had is listed `template: 1` for a while: a restarted provider still adopts it, and describe reports it", async () => {
  // /cluster/resources takes name and template flag from pvestatd's data, keyed by VMID and
  // a cycle late (docs/proxmox-notes.md "A node that is down").
  await using r = await rig({ timing: { ...SLOW_FIRST_DISK.timing, resourcesLagMs: 6_000 } });
  r.sim.addVm({ vmid: 100, name: "old-template", template: true });
  await waitFor("the old template listed", async () => {
    const listed = await listedGuest(r.sim, 100);
    return listed?.template === 1 || undefined;
  });
  r.sim.deleteVmOutOfBand(100);
  assert.equal(await killAndRestart(r), 100);
  assert.equal((await listedGuest(r.sim, 100))?.template, 1, "still listed as a template");
  const fresh = await createProxmoxBackend(r.cfg, { timing: FAST });
  try {
    const vms = await fresh.describe(signal());
    assert.deepEqual(vms.map((v) => v.vmid), [100]);
    assert.match(vms[0].machineId, /^proxmox\/OnDemand\/pve\.small\/pve1\//);
  } finally {
    await fresh.close();
  }
});

Deno.test("a clone POST answered 596, then a restart: the new process adopts that clone", async () => {
  await using r = await rig(SLOW_FIRST_DISK);
  // The answer is lost; the clone runs.
  r.sim.faults.http596 = [{ path: /\/clone$/, method: "POST", count: 1, delayMs: 50 }];
  const s = slot("pve1");
  const before = new AbortController();
  const first = r.backend.create(s, before.signal).catch((e) => e);
  await waitFor("the 596", () => r.sim.requests.some((q) => q.status === 596) || undefined);
  const temp = await inTemporaryConfig(r);
  before.abort(new Error("provider killed"));
  await first;
  const after = await createProxmoxBackend(r.cfg, { timing: FAST });
  try {
    const { hostRef } = await after.create(s, signal());
    assert.equal(vmidOf(hostRef), temp.vmid);
  } finally {
    await after.close();
  }
  assert.deepEqual(vmsOf(r, s.machineId).map((v) => v.vmid), [temp.vmid]);
  assert.equal(ordinary(r).length, 1);
});

Deno.test("a clone POST pveproxy gave up on and pvedaemon ran late makes one VM", async () => {
  // pve1's workers are busy with an operator's long calls: the clone POST
  // waits past the proxy timeout (596) and past the provider's look for its
  // clone; the workers free up as the provider sends the POST again.
  await using r = await rig({
    timing: { proxyTimeoutMs: 300, cloneMs: 600, cloneNamelessMs: 300 },
  });
  let again!: () => void;
  const secondPost = new Promise<void>((go) => again = go);
  let posts = 0;
  r.sim.faults.onRequest = (method, path) => {
    if (method === "POST" && path.endsWith("/clone") && ++posts === 2) again();
  };
  const busy = r.sim.occupyWorkers("pve1", 3, secondPost);
  await waitFor("busy workers", () => r.sim.workerPools().pve1.busy === 3 || undefined);
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  await busy;
  await waitFor(
    "every clone task done",
    () => r.sim.tasks().every((t) => t.status === "stopped") || undefined,
  );
  assert.equal(r.sim.requests.find((q) => q.path.endsWith("/clone"))!.status, 596);
  assert.deepEqual(vmsOf(r, s.machineId).map((v) => v.vmid), [vmidOf(hostRef)]);
  assert.equal(ordinary(r).length, 1);
});

Deno.test("a Create aborted during the clone's first phase leaves it to the next Create", async () => {
  await using r = await rig(SLOW_FIRST_DISK);
  const s = slot("pve2");
  const cut = new AbortController();
  const first = r.backend.create(s, cut.signal).catch((e) => e);
  const temp = await inTemporaryConfig(r);
  cut.abort(new Error("Create timed out"));
  assert.ok((await first) instanceof Error);
  const { hostRef } = await r.backend.create({ ...s, operationId: "op-redrive" }, signal());
  assert.equal(vmidOf(hostRef), temp.vmid);
  assert.equal(clonePosts(r), 1);
  assert.equal(ordinary(r).length, 1);
});

Deno.test("a temporary config is waited for only while a clone of our token we lost track of runs", async () => {
  await using r = await rig(SLOW_FIRST_DISK);
  // A dead clone's leftover (its worker was killed): no task runs for it.
  r.sim.addVm({ vmid: 703, node: "pve1", name: "dead", template: false });
  r.sim.editVmOutOfBand(703, (c) => {
    for (const k of Object.keys(c)) delete c[k];
    Object.assign(c, { description: " qmclone temporary file", lock: "clone" });
  });
  // Someone else cloning with the provider's token: it may be ours until it shows its name,
  // which it does only once the Create has said it waits for it.
  r.sim.faults.cloneHeld = [702];
  const api = { Authorization: r.sim.authHeader, "Content-Type": "application/json" };
  const client = Deno.createHttpClient({ caCerts: [r.sim.caPem] });
  const posted = await fetch(`${r.sim.url}/nodes/pve1/qemu/9000/clone`, {
    method: "POST",
    headers: api,
    client,
    body: JSON.stringify({ newid: 702, name: "web-3", description: "web", full: 1 }),
  });
  assert.equal(posted.status, 200);
  await posted.body?.cancel();
  client.close();
  const s = slot("pve1");
  const waited = () =>
    logLines.some((l) => /VM 702 is being cloned; waiting/.test(l) && l.includes(s.machineId));
  const created = r.backend.create(s, signal());
  await waitFor("the Create to wait for VM 702", waited);
  r.sim.faults.cloneHeld = [];
  const { hostRef } = await created;
  assert.ok(waited(), "Create waited for the clone it could not tell apart from its own");
  assert.ok(![702, 703].includes(vmidOf(hostRef)));
  assert.equal(r.sim.vm(702)!.name, "web-3", "left alone");
  assert.equal(r.sim.vm(703)!.lock, "clone", "left alone");
  assert.equal(clonePosts(r), 2);
});
