// Delete on a real cluster's terms: destroy only warns about a disk it could
// not free (the task ends OK), a pool-scoped token loses its rights on the
// VMID with the destroy, and a destroy that dies leaves `lock: destroyed`.

import assert from "node:assert/strict";
import { loadConfig } from "../../src/config/load.ts";
import { startApp } from "../../src/app.ts";
import { createMetrics } from "../../src/server/metrics.ts";
import { Harness, MachineState, waitFor } from "../harness/mod.ts";
import {
  FAST,
  logLines,
  providerArgs,
  rig,
  setupTokenAcl,
  signal,
  slot,
  vmidOf,
} from "./helpers.ts";

const watched = (vmid: number) =>
  `rbd rm 'vm-${vmid}-disk-0' error: rbd: error: image still has watchers`;

/** The first disk of a VM, as its volume id. */
function diskOf(
  r: { sim: { vm(id: number): { config: Record<string, unknown> } | undefined } },
  vmid: number,
) {
  return String(r.sim.vm(vmid)!.config.scsi0).split(",")[0];
}

const contentDeletes = (r: Awaited<ReturnType<typeof rig>>) =>
  r.sim.requests.filter((q) => q.method === "DELETE" && q.path.includes("/content/"));

/** Create a machine, make its disk fail to free (`times` frees, or always), then Delete it. */
async function deleteWithStuckDisk(r: Awaited<ReturnType<typeof rig>>, times?: number) {
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  const vmid = vmidOf(hostRef);
  const disk = diskOf(r, vmid);
  r.sim.faults.volumeFreeFailures = [{ match: disk, message: watched(vmid), times }];
  await r.backend.delete({ machineId: s.machineId, hostRef }, signal());
  assert.equal(r.sim.vm(vmid), undefined, "the VM is gone");
  return { vmid, disk };
}

// PVE 8.4 warns with a plain Perl `warn` and ends OK; qemu-server 9.1.19+ (PVE 9.2.11)
// prefixes `WARN: ` and ends `WARNINGS: 2` (docs/proxmox-notes.md "Destroy and leaked volumes").
for (const pveVersion of ["8.4.1", "9.2.11"]) {
  Deno.test(`delete (PVE ${pveVersion}): a disk the destroy only warned about is freed by a retry; nothing is leaked`, async () => {
    const leaked: string[] = [];
    await using r = await rig({ pveVersion }, {}, { leaked: (v: string) => leaked.push(v) });
    // The destroy and its unreferenced sweep both meet the watcher; it is gone by the first retry.
    const { vmid } = await deleteWithStuckDisk(r, 2);
    assert.deepEqual(r.sim.leftoverVolumes(), [], "the disk was freed");
    assert.equal(contentDeletes(r).length, 1, "one storage content DELETE freed it");
    assert.deepEqual(leaked, []);
    const destroy = r.sim.tasks().find((t) => t.type === "qmdestroy" && t.id === String(vmid));
    assert.equal(destroy?.exitstatus, pveVersion === "8.4.1" ? "OK" : "WARNINGS: 2");
  });

  Deno.test(`delete (PVE ${pveVersion}): a disk that cannot be freed is logged once and counted; the Delete succeeds`, async () => {
    const leaked: string[] = [];
    const metrics = createMetrics();
    await using r = await rig({ pveVersion }, {}, {
      leaked: (v: string) => {
        leaked.push(v);
        metrics.leakedVolume();
      },
      timing: { ...FAST, volumeAttempts: 3, volumeRetry: { initialMs: 10, maxMs: 20 } },
    });
    const from = logLines.length;
    const { disk } = await deleteWithStuckDisk(r);
    assert.deepEqual(r.sim.leftoverVolumes().map((v) => v.volid), [disk], "the disk stays");
    assert.equal(contentDeletes(r).length, 3, "bounded: volumeAttempts tries");
    assert.deepEqual(leaked, [disk], "counted once: the sweep's second line names no volume");
    const lines = logLines.slice(from).filter((l) => l.startsWith("warning") && l.includes(disk));
    assert.equal(lines.length, 1, lines.join("\n"));
    assert.match(lines[0], /pvesm free/);
    assert.match(lines[0], /image still has watchers/);
    const { body } = await metrics.scrape();
    assert.match(body, /^bigfleet_proxmox_leaked_volumes_total 1$/m);
  });
}

Deno.test("delete: without Datastore.Allocate the disk cannot be freed: leaked at once, the privilege named", async () => {
  const leaked: string[] = [];
  await using r = await rig({ acl: await setupTokenAcl() }, {}, {
    leaked: (v: string) => leaked.push(v),
  });
  const { disk } = await deleteWithStuckDisk(r);
  assert.equal(contentDeletes(r).length, 1, "a 403 is not retried");
  assert.deepEqual(leaked, [disk]);
  assert.ok(
    logLines.some((l) => l.includes(disk) && l.includes("Datastore.Allocate")),
    "the missing privilege is named",
  );
});

Deno.test("delete with a pool-only token (setup-token.sh --no-audit-all-vms) ends SPECULATIVE", async () => {
  await using r = await rig({ acl: await setupTokenAcl("--no-audit-all-vms") });
  const dir = await Deno.makeTempDir();
  const tokenFile = `${dir}/token`;
  await Deno.writeTextFile(tokenFile, r.sim.tokenSecret);
  const config = await loadConfig([
    ...providerArgs(r.sim, tokenFile, { seed: 2 }),
    "--addr=127.0.0.1:0",
    "--reconcile-interval=0",
  ]);
  const app = await startApp(config, { backend: r.backend });
  const h = new Harness(`127.0.0.1:${app.grpcPort}`);
  try {
    const { id } = await h.walkToIdle();
    const hostRef = (await h.get(id)).host!.ref;
    await h.delete(id);
    await h.mustReach(id, MachineState.SPECULATIVE);
    assert.equal(r.sim.vm(vmidOf(hostRef)), undefined, "the VM is gone");
  } finally {
    h.close();
    await app.stop();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("delete with a pool-only token: a repeat after the destroy, and a 596 on it, count as gone", async () => {
  await using r = await rig({ acl: await setupTokenAcl("--no-audit-all-vms") });
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  await r.backend.delete({ machineId: s.machineId, hostRef }, signal());
  // Again (a kit retry, a second Delete): the VMID is 403 now, and we destroyed it.
  await r.backend.delete({ machineId: s.machineId, hostRef }, signal());

  const t = slot("pve1");
  const made = await r.backend.create(t, signal());
  const vmid = vmidOf(made.hostRef);
  // The destroy happens, its answer is lost; every read after it is a 403.
  r.sim.faults.http596 = [{ path: `/nodes/pve1/qemu/${vmid}`, method: "DELETE", count: 1 }];
  await r.backend.delete({ machineId: t.machineId, hostRef: made.hostRef }, signal());
  // The 403 comes once the VMID has left its pool, which PVE's destroy does just before it
  // removes the `lock: destroyed` stub: the task the lost answer started ends on its own.
  await waitFor("the destroy whose answer was lost ends", () => r.sim.vm(vmid) === undefined);

  // A VMID this provider never destroyed stays refused: a 403 alone proves nothing.
  const stranger = slot("pve1");
  const err = await r.backend.delete(
    { machineId: stranger.machineId, hostRef: "pve1/4242" },
    signal(),
  )
    .then(() => null, (e) => e);
  assert.match(String(err), /refusing to destroy it/);
});

Deno.test("delete: a destroy task that died on its `lock: destroyed` stub is reported, not waited on", async () => {
  await using r = await rig({}, {}, { timing: { ...FAST, destroyedGraceMs: 200 } });
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  const vmid = vmidOf(hostRef);
  r.sim.faults.destroyDies = 1;
  await r.backend.delete({ machineId: s.machineId, hostRef }, signal());
  assert.equal(r.sim.vm(vmid)?.config.lock, "destroyed", "the stub stays (only root can clear it)");
  assert.ok(
    logLines.some((l) =>
      l.startsWith("warning") && l.includes(`"vmid":${vmid}`) && /lock: destroyed/.test(l) &&
      /qm unlock/.test(l)
    ),
    "the operator is told what to remove",
  );
});

Deno.test("configure on a VM left as a `lock: destroyed` stub fails with that, within the grace", async () => {
  await using r = await rig({}, {}, { timing: { ...FAST, destroyedGraceMs: 200 } });
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  const vmid = vmidOf(hostRef);
  r.sim.editVmOutOfBand(vmid, (c) => {
    for (const k of Object.keys(c)) delete c[k];
    c.lock = "destroyed";
  });
  const t0 = Date.now();
  const err = await r.backend.configure({ machineId: s.machineId, hostRef }, {
    clusterId: "c1",
    bootstrap: new Uint8Array([1]),
  }, AbortSignal.timeout(10_000)).then(() => null, (e) => e);
  assert.match(String(err), new RegExp(`VM ${vmid} .*lock: destroyed`));
  assert.ok(Date.now() - t0 < 5_000, "not waited on until the deadline");
});

Deno.test("delete whose destroy outlives its token (rotated and removed mid-destroy): the Delete ends, and a disk the destroy could not free is found without its log, retried and counted", async () => {
  const leaked: string[] = [];
  const dir = await Deno.makeTempDir({ prefix: "bf-rotated-destroy-" });
  const file = `${dir}/token`;
  // setup-token.sh's grants (tasks are per token), plus Datastore.Allocate on the disks' storage.
  const acl = await setupTokenAcl();
  for (const ugid of ["user", "token"] as const) {
    acl.entries.push({ path: "/storage/ceph-vm", privs: ["Datastore.Allocate"], ugid });
  }
  try {
    await using r = await rig(
      {
        acl,
        timing: { cloneMs: 120, cloneNamelessMs: 40, taskMs: 2_500, agentBootMs: 80, execMs: 20 },
      },
      (sim) => {
        Deno.writeTextFileSync(file, `${sim.tokenId}=${sim.tokenSecret}\n`);
        return { tokenFile: file };
      },
      {
        leaked: (v: string) => leaked.push(v),
        timing: { ...FAST, volumeAttempts: 2, volumeRetry: { initialMs: 10, maxMs: 20 } },
      },
    );
    const s = slot("pve1");
    const { hostRef } = await r.backend.create(s, signal());
    const vmid = vmidOf(hostRef);
    const disk = diskOf(r, vmid);
    r.sim.faults.volumeFreeFailures = [{ match: disk, message: watched(vmid) }];
    // Without Sys.Audit on the node (setup-token.sh grants it for node capacity; a narrower
    // grant does not), no token but the one that started the destroy may read its task.
    acl.entries = acl.entries.filter((e) => e.path !== "/nodes");
    const from = logLines.length;
    const deleted = r.backend.delete({ machineId: s.machineId, hostRef }, signal());
    await waitFor(
      "the destroy running",
      () =>
        r.sim.tasks().some((t) => t.type === "qmdestroy" && t.status === "running") || undefined,
    );
    const B = "bigfleet@pve!autoscaler-r1";
    r.sim.addToken(B, "secret-r1");
    await Deno.writeTextFile(file, `${B}=secret-r1\n${r.sim.tokenId}=${r.sim.tokenSecret}\n`);
    await waitFor(
      "the switch",
      () => logLines.slice(from).some((l) => l.includes(`now using token ${B}`)) || undefined,
    );
    r.sim.removeToken(r.sim.tokenId);
    assert.ok(r.sim.tasks().some((t) => t.type === "qmdestroy" && t.status === "running"));
    await deleted;
    assert.equal(r.sim.vm(vmid), undefined, "the VM is gone");
    const lines = logLines.slice(from);
    assert.ok(
      lines.some((l) => /destroy of VM \d+\) cannot be read .*following what it does/.test(l)),
    );
    assert.deepEqual(leaked, [disk], "seen without the destroy's log, and counted");
    assert.equal(contentDeletes(r).length, 2, "retried: volumeAttempts frees");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
