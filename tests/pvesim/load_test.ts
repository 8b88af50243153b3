// Self-tests of a node under load: pvedaemon's worker pool and what each
// call holds it for, pveproxy's proxy timeout, the clone worker's config
// locks and vdisk_alloc's storage locks (docs/proxmox-notes.md).

import assert from "node:assert/strict";
import { type Api, cloneAndWait, until, withSim } from "./testkit.ts";
import type { SimRequestLog, Simulator } from "./types.ts";

/** A running VM whose guest agent never answers, on pve1. */
async function silentGuest(sim: Simulator, api: Api): Promise<number> {
  const { newid } = await cloneAndWait(api);
  sim.faults.agentDown = true;
  sim.startVmOutOfBand(newid);
  return newid;
}

const logged = (sim: Simulator, pred: (r: SimRequestLog) => boolean) => sim.requests.filter(pred);

Deno.test("pvedaemon: three workers per node, held 3 s by each ping while the agent is down", async () => {
  const hold = 300;
  await withSim(async (sim, api) => {
    const vmid = await silentGuest(sim, api);
    const t0 = Date.now();
    const pings = Array.from(
      { length: 6 },
      () =>
        api.call("POST", `/nodes/pve1/qemu/${vmid}/agent/ping`).then((r) => ({
          status: r.status,
          text: r.body?.message,
          at: Date.now() - t0,
        })),
    );
    // Wait until all six are with pvedaemon: three run, three queue.
    await until(() => sim.workerPools().pve1.queued === 3 || undefined);
    // pveproxy answers unprotected reads itself, at once; pve2's pvedaemon is idle.
    const config = await api.call("GET", `/nodes/pve1/qemu/${vmid}/config`);
    assert.equal(config.status, 200);
    assert.ok(Date.now() - t0 < hold, "GET config did not wait for a worker");
    assert.equal((await api.call("GET", "/nodes/pve2/qemu/9000/status/current")).status, 500);
    // A protected read on pve1 queues behind the pings.
    const current = await api.call("GET", `/nodes/pve1/qemu/${vmid}/status/current`);
    assert.equal(current.status, 200);
    const done = await Promise.all(pings);
    for (const p of done) {
      assert.equal(p.status, 500);
      assert.equal(p.text, "QEMU guest agent is not running\n");
    }
    const times = done.map((p) => p.at).sort((a, b) => a - b);
    assert.ok(times[2] >= hold, `first wave held its workers ${hold} ms: ${times}`);
    assert.ok(times[5] >= 2 * hold, `second wave waited for the first: ${times}`);
    const waits = logged(sim, (r) => r.path.endsWith("/agent/ping")).map((r) => r.workerWaitMs!)
      .sort((a, b) => a - b);
    assert.equal(waits.filter((w) => w < hold / 2).length, 3, `three started at once: ${waits}`);
    const cur = logged(sim, (r) => r.path === `/nodes/pve1/qemu/${vmid}/status/current`)[0];
    assert.ok(cur.workerWaitMs! >= hold, "status/current waited for a free worker");
    assert.equal(cur.workerNode, "pve1");
    assert.equal(logged(sim, (r) => r.path.endsWith("/config"))[0].workerWaitMs, undefined);
  }, { timing: { qgaPingTimeoutMs: hold } });
});

Deno.test("pvedaemon: the worker count is configurable", async () => {
  await withSim(async (sim, api) => {
    const vmid = await silentGuest(sim, api);
    const pings = [1, 2].map(() => api.call("POST", `/nodes/pve1/qemu/${vmid}/agent/ping`));
    await until(() => sim.workerPools().pve1.queued === 1 || undefined);
    assert.equal(sim.workerPools().pve1.size, 1);
    await Promise.all(pings);
  }, { pvedaemonWorkers: 1, timing: { qgaPingTimeoutMs: 200 } });
});

Deno.test("pvedaemon: how long each kind of call holds its worker", async () => {
  const t = {
    qgaPingTimeoutMs: 400,
    qgaRoundTripMs: 40,
    fileWriteMsPerKiB: 2,
    cloneForkMs: 150,
    daemonCallMs: 30,
    agentBootMs: 0,
  };
  await withSim(async (sim, api) => {
    const timed = async (method: string, path: string, json?: unknown) => {
      const t0 = Date.now();
      const r = await api.call(method, path, json === undefined ? {} : { json });
      return { status: r.status, ms: Date.now() - t0, body: r.body };
    };
    const clone = await timed("POST", "/nodes/pve1/qemu/9000/clone", { newid: 300, full: 1 });
    assert.equal(clone.status, 200);
    assert.ok(clone.ms >= t.cloneForkMs, `clone POST holds until its fork: ${clone.ms}`);
    await api.waitTask(clone.body.data);
    const stopped = await timed("POST", "/nodes/pve1/qemu/300/agent/ping");
    assert.equal(stopped.body.message, "VM 300 is not running\n");
    assert.ok(stopped.ms < t.qgaPingTimeoutMs, "a stopped VM's agent call fails at once");
    sim.startVmOutOfBand(300);
    const ping = await timed("POST", "/nodes/pve1/qemu/300/agent/ping");
    assert.equal(ping.status, 200);
    assert.ok(ping.ms >= 2 * t.qgaRoundTripMs && ping.ms < t.qgaPingTimeoutMs, `ping: ${ping.ms}`);
    const small = await timed("POST", "/nodes/pve1/qemu/300/agent/file-write", {
      file: "/tmp/a",
      content: btoa("x".repeat(30)),
      encode: 0,
    });
    const big = await timed("POST", "/nodes/pve1/qemu/300/agent/file-write", {
      file: "/tmp/b",
      content: "A".repeat(61440),
      encode: 0,
    });
    assert.ok(small.ms >= 6 * t.qgaRoundTripMs, `file-write: six round trips: ${small.ms}`);
    assert.ok(big.ms >= 6 * t.qgaRoundTripMs + 60 * t.fileWriteMsPerKiB, `by size: ${big.ms}`);
    const exec = await timed("POST", "/nodes/pve1/qemu/300/agent/exec", { command: ["true"] });
    assert.ok(exec.ms >= 2 * t.qgaRoundTripMs && exec.ms < 6 * t.qgaRoundTripMs, `${exec.ms}`);
    const cur = await timed("GET", "/nodes/pve1/qemu/300/status/current");
    assert.ok(cur.ms >= t.daemonCallMs, `other protected calls: daemonCallMs: ${cur.ms}`);
    sim.faults.agentDown = true;
    const down = await timed("POST", "/nodes/pve1/qemu/300/agent/exec", { command: ["true"] });
    assert.equal(down.body.message, "QEMU guest agent is not running\n");
    assert.ok(down.ms >= t.qgaPingTimeoutMs, `every agent call waits out the ping: ${down.ms}`);
  }, { timing: t });
});

Deno.test("pveproxy: 596 after the proxy timeout, and the queued call still runs", async () => {
  await withSim(async (sim, api) => {
    const busy = sim.occupyWorkers("pve1", 3, 900);
    await until(() => sim.workerPools().pve1.busy === 3 || undefined);
    const t0 = Date.now();
    const put = await api.call("PUT", "/nodes/pve1/qemu/9000/config", { json: { cores: 6 } });
    assert.equal(put.status, 596);
    assert.equal(put.text, "Connection timed out\n");
    assert.ok(Date.now() - t0 >= 300);
    assert.equal(sim.vm(9000)!.config.cores, 2, "not run yet: still queued");
    await busy;
    await until(() => sim.vm(9000)!.config.cores === 6 || undefined);
    // Unprotected calls never queue.
    assert.equal((await api.call("GET", "/cluster/resources")).status, 200);
  }, { timing: { proxyTimeoutMs: 300 } });
});

Deno.test("clone: the template's config lock is taken shared, with a 1 s timeout", async () => {
  await withSim(async (sim, api) => {
    // Parallel clones of one template do not block each other.
    const ids = [201, 202, 203];
    const ups = await Promise.all(
      ids.map((newid) =>
        api.data("POST", "/nodes/pve1/qemu/9000/clone", { json: { newid, full: 1 } })
      ),
    );
    for (const u of ups) assert.equal((await api.waitTask(u as string)).exitstatus, "OK");
    // An exclusive holder (a `qm set` on the template) longer than the timeout.
    const held = sim.holdConfigLock(9000, 600);
    const upid = await api.data("POST", "/nodes/pve1/qemu/9000/clone", {
      json: { newid: 204, full: 1 },
    }) as string;
    const st = await api.waitTask(upid);
    assert.equal(
      st.exitstatus,
      "can't lock file '/var/lock/qemu-server/lock-9000.conf' - got timeout",
    );
    assert.equal(sim.vm(204), undefined, "nothing was made");
    // As on the rig.
    const log = await api.data("GET", `/nodes/pve1/tasks/${upid}/log`) as { t: string }[];
    assert.deepEqual(log.map((l) => l.t), [
      "trying to acquire lock...",
      "TASK ERROR: can't lock file '/var/lock/qemu-server/lock-9000.conf' - got timeout",
    ]);
    await held;
  }, { timing: { lockTimeoutMs: 200 } });
});

Deno.test("clone: vdisk_alloc's storage lock times out under parallel clones", async () => {
  const templates = [
    { vmid: 9000, node: "pve1", name: "t-lvm", storage: "local-lvm" },
    { vmid: 9001, node: "pve2", name: "t-lvm2", storage: "local-lvm" },
    { vmid: 9002, node: "pve1", name: "t-ceph", storage: "ceph-vm" },
  ];
  await withSim(async (sim, api) => {
    const clone = (src: number, node: string, newid: number) =>
      api.data("POST", `/nodes/${node}/qemu/${src}/clone`, { json: { newid, full: 1 } })
        .then((u) => api.waitTask(u as string, 10_000))
        .then((st) => ({ newid, exit: String(st.exitstatus), upid: String(st.upid) }));
    // Five at once on pve1's local-lvm: each allocation holds the flock 150 ms,
    // waits are given up after 400 ms.
    const local = await Promise.all([301, 302, 303, 304, 305].map((id) => clone(9000, "pve1", id)));
    const failed = local.filter((r) => r.exit !== "OK");
    assert.ok(local.filter((r) => r.exit === "OK").length >= 2, JSON.stringify(local));
    assert.ok(failed.length >= 1, JSON.stringify(local));
    for (const f of failed) {
      assert.equal(
        f.exit,
        "clone failed: can't lock file '/var/lock/pve-manager/pve-storage-local-lvm' - got timeout",
      );
      assert.equal(sim.vm(f.newid), undefined, "the failed clone removed its config");
      const log = await api.data("GET", `/nodes/pve1/tasks/${f.upid}/log`) as { t: string }[];
      assert.ok(log.some((l) => l.t === "trying to acquire lock..."));
    }
    // The flock is per node: pve2's local-lvm is another lock.
    const held = sim.holdStorageLock("local-lvm", 1500, "pve1");
    const [other, same] = await Promise.all([clone(9001, "pve2", 310), clone(9000, "pve1", 311)]);
    assert.equal(other.exit, "OK");
    assert.match(same.exit, /pve-storage-local-lvm' - got timeout$/);
    await held;
    // Shared storage: one cluster lock for every node.
    const cfs = sim.holdStorageLock("ceph-vm", 1500, "pve2");
    assert.equal(
      (await clone(9002, "pve1", 312)).exit,
      "clone failed: cfs-lock 'storage-ceph-vm' error: got lock request timeout",
    );
    await cfs;
    assert.equal((await clone(9002, "pve1", 313)).exit, "OK");
  }, {
    templates,
    timing: { storageAllocMs: 150, storageLockTimeoutMs: 400, cloneMs: 200, cloneNamelessMs: 100 },
  });
});

Deno.test("clone: a failed clone whose cleanup fails leaves its half-made VM", async () => {
  await withSim(async (sim, api) => {
    sim.faults.cloneCleanupFails = true;
    sim.faults.taskError = { qmclone: "disk copy failed" };
    const { newid, status } = await cloneAndWait(api, { description: "mine" });
    assert.equal(status.exitstatus, "clone failed: disk copy failed");
    const vm = sim.vm(newid)!;
    assert.equal(vm.lock, undefined);
    assert.equal(vm.description, "mine");
    assert.match(String(vm.config.scsi0), new RegExp(`vm-${newid}-disk-0`));
  });
});

Deno.test("tasks: a node's task list shows running clones as RUNNING, without a worker", async () => {
  await withSim(async (sim, api) => {
    const upid = await api.data("POST", "/nodes/pve1/qemu/9000/clone", {
      json: { newid: 400, full: 1 },
    }) as string;
    const busy = sim.occupyWorkers("pve1", 3, 500);
    await until(() => sim.workerPools().pve1.busy === 3 || undefined);
    const t0 = Date.now();
    const active = await api.data("GET", "/nodes/pve1/tasks?source=active&typefilter=qmclone") as {
      upid: string;
      status: string;
      user: string;
      id: string;
    }[];
    assert.ok(Date.now() - t0 < 400, "pveproxy answers it itself");
    assert.deepEqual(active.map((t) => [t.upid, t.status, t.user, t.id]), [
      [upid, "RUNNING", sim.tokenId, "9000"],
    ]);
    await busy;
    await api.waitTask(upid);
    assert.deepEqual(await api.data("GET", "/nodes/pve1/tasks?source=active"), []);
    const archived = await api.data("GET", "/nodes/pve1/tasks?typefilter=qmclone") as {
      status: string;
      user: string;
      tokenid: string;
    }[];
    assert.deepEqual(archived.map((t) => [t.status, t.user, t.tokenid]), [[
      "OK",
      sim.tokenId.split("!")[0],
      sim.tokenId.split("!")[1],
    ]]);
  }, { timing: { cloneMs: 600, cloneNamelessMs: 300 } });
});
