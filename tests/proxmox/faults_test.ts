// Failure paths: proxy errors (596 & co.), slow or missing agents, out-of-band
// stops, failing hooks, big blobs, permissions.

import assert from "node:assert/strict";
import { BackendError } from "../../src/kit/backend.ts";
import { authed, FAST, rig, signal, slot, vmidOf } from "./helpers.ts";

const MiB = 1024 * 1024;

/** Deterministic pseudo-random bytes (crypto.getRandomValues caps at 64 KiB per call). */
function noise(n: number, seed = 1): Uint8Array {
  const out = new Uint8Array(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}

Deno.test("596 on the clone POST (clone happened): found and adopted, not cloned twice", async () => {
  await using r = await rig();
  r.sim.faults.http596.push({ path: /\/clone$/, method: "POST", count: 1 });
  const { hostRef } = await r.backend.create(slot("pve2"), signal());
  assert.equal(r.sim.vms().filter((v) => !v.template).length, 1);
  assert.equal(r.sim.vm(vmidOf(hostRef))!.status, "running");
});

Deno.test("596 on the clone POST (clone lost): cloned again", async () => {
  await using r = await rig();
  r.sim.faults.http596.push({ path: /\/clone$/, method: "POST", count: 1, performed: false });
  const { hostRef } = await r.backend.create(slot("pve1"), signal());
  assert.equal(r.sim.vms().filter((v) => !v.template).length, 1);
  assert.equal(r.sim.vm(vmidOf(hostRef))!.status, "running");
});

Deno.test("596/502 on config PUT, start, reads and agent ping are never taken as success", async () => {
  await using r = await rig();
  r.sim.faults.http596.push(
    { path: /\/config$/, method: "PUT", count: 1, performed: false },
    { path: /\/status\/start$/, method: "POST", count: 1 },
    { path: "/cluster/nextid", method: "GET", count: 1, status: 502, reason: "Bad Gateway" },
    { path: /\/agent\/ping$/, method: "POST", count: 2 },
  );
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  const vm = r.sim.vm(vmidOf(hostRef))!;
  // The lost PUT was detected and repeated: sizing and tags really landed.
  assert.equal(Number(vm.config.cores), 2);
  assert.equal(vm.config.tags, "bigfleet", "the template's tags replaced");
  assert.equal(vm.status, "running");
  assert.equal(vm.starts, 1, "start behind the 596 was not repeated");
});

Deno.test("596 on file-write is retried; on the bootstrap exec it fails without re-running", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  const m = { machineId: s.machineId, hostRef };
  r.sim.faults.http596.push({ path: /\/agent\/file-write$/, count: 1, performed: false });
  await r.backend.configure(m, { clusterId: "c", bootstrap: new Uint8Array([1, 2, 3]) }, signal());
  assert.equal(r.sim.vm(vmidOf(hostRef))!.bootstrapRuns.length, 1);

  r.sim.faults.http596.push({ path: /\/agent\/exec$/, count: 1 });
  await assert.rejects(
    r.backend.configure(m, { clusterId: "c", bootstrap: new Uint8Array([4]) }, signal()),
    /lost track of the exec .*596.*not re-running/,
  );
  assert.equal(r.sim.vm(vmidOf(hostRef))!.bootstrapRuns.length, 2, "exactly one more run");
});

Deno.test("596 on DELETE: state is re-read and the VM ends up gone", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  r.sim.faults.http596.push({ path: /^\/nodes\/pve1\/qemu\/\d+$/, method: "DELETE", count: 1 });
  await r.backend.delete({ machineId: s.machineId, hostRef }, signal());
  assert.equal(r.sim.vm(vmidOf(hostRef)), undefined);
});

Deno.test("a call pvedaemon refused before its worker ran is sent again: clone, start, stop, destroy", async () => {
  await using r = await rig();
  r.sim.faults.workerStartFailures = { qmclone: 1, qmstart: 2 };
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  assert.deepEqual(r.sim.faults.workerStartFailures, { qmclone: 0, qmstart: 0 }, "each refused");
  assert.equal(r.sim.vms().filter((v) => !v.template).length, 1, "one clone");
  assert.equal(r.sim.vm(vmidOf(hostRef))!.starts, 1);

  r.sim.faults.workerStartFailures = { qmstop: 1, qmdestroy: 1 };
  await r.backend.delete({ machineId: s.machineId, hostRef }, signal());
  assert.deepEqual(r.sim.faults.workerStartFailures, { qmstop: 0, qmdestroy: 0 }, "each refused");
  assert.equal(r.sim.vm(vmidOf(hostRef)), undefined);
});

Deno.test("a worker that never starts, attempt after attempt, fails the call in pvedaemon's words", async () => {
  await using r = await rig({}, {}, { timing: { ...FAST, readAttempts: 3 } });
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  r.sim.faults.workerStartFailures = { qmstop: 10 };
  await assert.rejects(
    r.backend.delete({ machineId: s.machineId, hostRef }, signal()),
    /POST \/nodes\/pve1\/qemu\/\d+\/status\/stop: 500 got no worker upid - start worker failed/,
  );
  assert.equal(r.sim.faults.workerStartFailures.qmstop, 7, "sent three times, then given up");
  assert.equal(r.sim.vm(vmidOf(hostRef))?.status, "running", "nothing else was tried");
});

Deno.test("a slow guest agent (boot delay, timeouts, slow answers) is waited for", async () => {
  await using r = await rig({ timing: { agentBootMs: 700 } });
  r.sim.faults.agentTimeouts = 3;
  r.sim.faults.agentSlowMs = 30;
  const { hostRef } = await r.backend.create(slot("pve1"), signal());
  const pings = r.sim.requests.filter((q) => q.path.endsWith("/agent/ping"));
  assert.ok(pings.length >= 4, `polled ${pings.length} times`);
  assert.equal(r.sim.vm(vmidOf(hostRef))!.status, "running");
});

Deno.test("an agent that never comes up fails with a clear error", async () => {
  await using r = await rig({}, {}, { timing: { agentTimeoutMs: 400 } });
  r.sim.faults.agentDown = true;
  await assert.rejects(
    r.backend.create(slot("pve1"), signal()),
    /guest agent of VM \d+ did not answer within 0.4s \(last error: .*QEMU guest agent is not running/,
  );
  assert.deepEqual(r.observed.map((o) => `${o.op}:${o.outcome}`), [
    "CloneVM:ok",
    "EnsureRunning:error",
  ]);
});

Deno.test("an out-of-band stop before Configure and before Drain: powered on, agent awaited", async () => {
  await using r = await rig();
  const s = slot("pve2");
  const { hostRef } = await r.backend.create(s, signal());
  const vmid = vmidOf(hostRef);
  const m = { machineId: s.machineId, hostRef };
  r.sim.stopVmOutOfBand(vmid);
  await r.backend.configure(m, { clusterId: "c", bootstrap: new Uint8Array([9]) }, signal());
  assert.equal(r.sim.vm(vmid)!.bootstrapRuns.length, 1);
  r.sim.stopVmOutOfBand(vmid);
  await r.backend.drain(m, -1n, signal());
  const v = r.sim.vm(vmid)!;
  assert.equal(v.starts, 3);
  assert.match(v.drains[0].command.join(" "), /--grace-period=-1 /);
});

Deno.test("a failing hook: exit code and the tail of stderr, never the blob", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  r.sim.faults.bootstrapExitCode = 3;
  r.sim.faults.bootstrapStderr = "noise\n".repeat(500) + "kubeadm: join failed: token expired\n";
  const blob = new TextEncoder().encode("BLOB-SECRET-" + crypto.randomUUID());
  const err = await r.backend.configure(
    { machineId: s.machineId, hostRef },
    { clusterId: "c", bootstrap: blob },
    signal(),
  ).then(() => null, (e) => e);
  assert.ok(err instanceof BackendError);
  assert.match(err.message, /failed \(exit code 3\)/);
  assert.match(err.message, /kubeadm: join failed: token expired$/);
  assert.ok(err.message.length < 1500, "only a tail of stderr");
  assert.ok(!err.message.includes("BLOB-SECRET"));
});

Deno.test("a signal-killed hook is a failure", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  r.sim.faults.execHandler = (argv) =>
    argv.includes("/run/bigfleet-bootstrap") ? { signal: 9 } : undefined;
  await assert.rejects(
    r.backend.configure({ machineId: s.machineId, hostRef }, {
      clusterId: "c",
      bootstrap: new Uint8Array(1),
    }, signal()),
    /killed by signal 9/,
  );
});

Deno.test("a failing drain is a hard failure with kubectl's stderr", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  r.sim.faults.drainExitCode = 1;
  r.sim.faults.drainStderr =
    "error: cannot evict pod as it would violate the pod's disruption budget\n";
  await assert.rejects(
    r.backend.drain({ machineId: s.machineId, hostRef }, 10n, signal()),
    /kubectl drain in VM \d+ failed \(exit code 1\): error: cannot evict pod/,
  );
});

for (const maxBodyBytes of [512 * 1024, 64 * 1024]) {
  Deno.test(`a 3 MiB blob arrives byte-exact (POST limit ${maxBodyBytes / 1024} KiB)`, async () => {
    await using r = await rig({ maxBodyBytes });
    const s = slot("pve1");
    const { hostRef } = await r.backend.create(s, signal());
    const blob = noise(3 * MiB, 7);
    await r.backend.configure({ machineId: s.machineId, hostRef }, {
      clusterId: "c",
      bootstrap: blob,
    }, signal());
    const vm = r.sim.vm(vmidOf(hostRef))!;
    assert.equal(vm.bootstrapRuns.length, 1);
    assert.equal(vm.bootstrapRuns[0].content.length, blob.length);
    assert.deepEqual(vm.bootstrapRuns[0].content, blob);
    assert.ok(vm.fileWrites.length >= Math.ceil(blob.length / 46080));
    assert.ok(vm.fileWrites.every((w) => w.content.length <= 61440 && w.encode === false));
    // Parts are cleaned up; only the blob itself remains.
    assert.deepEqual(Object.keys(vm.files).filter((f) => f.startsWith("/run/bigfleet-bootstrap")), [
      "/run/bigfleet-bootstrap",
    ]);
  });
}

Deno.test("blobs at the chunk boundaries arrive byte-exact", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  for (const n of [0, 1, 46077, 46080, 46081, 92160, 92161]) {
    const blob = noise(n, n + 3);
    await r.backend.configure({ machineId: s.machineId, hostRef }, {
      clusterId: "c",
      bootstrap: blob,
    }, signal());
    const runs = r.sim.vm(vmidOf(hostRef))!.bootstrapRuns;
    assert.deepEqual(runs[runs.length - 1].content, blob, `size ${n}`);
  }
});

Deno.test("delete without VM.Audit (listing hidden): destroyed, and gone is still success", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  r.sim.faults.auditHidden = true;
  assert.deepEqual(await r.backend.describe(signal()), []);
  await r.backend.delete({ machineId: s.machineId, hostRef }, signal());
  assert.equal(r.sim.vm(vmidOf(hostRef)), undefined, "really destroyed, not 'absent from listing'");
  await r.backend.delete({ machineId: s.machineId, hostRef }, signal());
});

Deno.test("delete when the VM itself cannot be read (403): refused, the VM is left alone", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  r.sim.faults.auditHidden = true;
  r.sim.faults.forbidden = /\/(config|status\/current)$/;
  await assert.rejects(
    r.backend.delete({ machineId: s.machineId, hostRef }, signal()),
    /cannot read VM \d+ .*grant VM\.Audit.*refusing to destroy it/,
  );
  const vm = r.sim.vm(vmidOf(hostRef));
  assert.ok(vm, "an unverifiable VM is never destroyed");
  assert.equal(vm.status, "running", "nor stopped");
});

Deno.test("describe: a listed VM whose config turns 403 is still the machine its marker named", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  // What a pool-scoped token sees while a destroy has taken the VMID out of its pool.
  r.sim.faults.forbidden = new RegExp(`/qemu/${vmidOf(hostRef)}/config$`);
  const vms = await r.backend.describe(signal());
  assert.deepEqual(
    vms.map((v) => [v.machineId, v.hostRef, v.status]),
    [[s.machineId, hostRef, "running"]],
    "not an orphan without an id",
  );
});

Deno.test("describe: a VMID this provider destroyed that reads 403 is not reported", async () => {
  await using r = await rig();
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  const vmid = vmidOf(hostRef);
  await r.backend.delete({ machineId: s.machineId, hostRef }, signal());
  // A listing read just before the destroy still shows it; its config is no longer ours to read.
  r.sim.addVm({ vmid, node: "pve1", name: `bigfleet-${vmid}`, template: false, tags: "bigfleet" });
  r.sim.faults.forbidden = new RegExp(`/qemu/${vmid}/config$`);
  assert.deepEqual(await r.backend.describe(signal()), []);
});

Deno.test("create works without VM.Audit on the listing (template found by direct reads)", async () => {
  await using r = await rig({ auditHidden: true });
  const { hostRef } = await r.backend.create(slot("pve2"), signal());
  assert.equal(r.sim.vm(vmidOf(hostRef))!.status, "running");
});

Deno.test("401 and 403 surface as clear errors", async () => {
  await using r = await rig();
  r.sim.faults.unauthorized = true;
  await assert.rejects(
    r.backend.describe(signal()),
    /401 authentication failed \(check the API token/,
  );
  r.sim.faults.unauthorized = false;
  r.sim.faults.forbidden = /\/clone$/;
  await assert.rejects(
    r.backend.create(slot("pve1"), signal()),
    /403 Permission check failed \(\/vms\/9000, VM\.Clone\)/,
  );
  r.sim.faults.forbidden = false;
  assert.ok(authed(r.sim).length > 0);
});

Deno.test("a missing pool is a 403 on the clone", async () => {
  await using r = await rig({}, { pool: "nope" });
  await assert.rejects(
    r.backend.create(slot("pve1"), signal()),
    /403 Permission check failed \(pool 'nope' does not exist\)/,
  );
});

Deno.test("aborting the signal stops the operation promptly", async () => {
  await using r = await rig();
  r.sim.faults.agentDown = true;
  const ctl = new AbortController();
  const p = r.backend.create(slot("pve1"), ctl.signal);
  setTimeout(() => ctl.abort(new Error("transition timed out")), 300);
  const t0 = Date.now();
  await assert.rejects(p, /transition timed out/);
  assert.ok(Date.now() - t0 < 1000);
});
