// The provider on the one real node under a small burst, and a Delete that
// leaks a disk: three Creates at once (clones, sizing PUTs, starts and agent
// waits sharing pvedaemon's three workers with an operator's calls that hold
// them on VM locks), checked against pveproxy's own access log; then a Delete whose disk cannot be freed (an immutable file, as
// an RBD image still watched or an LV still open is on a cluster), which
// destroy_vm only logs.

import assert from "node:assert/strict";
import { freePort, MachineState } from "../harness/mod.ts";
import {
  createIdle,
  fileProvider,
  laneIdentity,
  laneMachine,
  markersInPool,
  qmConfig,
  startLaneProvider,
  sweepPools,
  vmidOf,
  volumesOf,
} from "./lane.ts";
import { api, destroyVm, exec, laneTest, rig, RigApiError, run, waitTask } from "./rig.ts";

const PROVIDER = "burst";
const machine = (i: number) => laneMachine(i, PROVIDER);
const METRICS_PORT = freePort();

const provider = fileProvider(async () => {
  await sweepPools();
  const id = await laneIdentity("default");
  return await startLaneProvider(id, {
    provider: PROVIDER,
    seed: 3,
    metricsAddr: `127.0.0.1:${METRICS_PORT}`,
  });
});
const harness = provider.get;

/** The answers pveproxy logged for `tokenId` since line `mark` of its access log, by status. */
async function statusesSince(mark: number, tokenId: string): Promise<Record<string, number>> {
  const text = await run("sh", "-c", `tail -n +${mark + 1} /var/log/pveproxy/access.log`);
  const out: Record<string, number> = {};
  for (const line of text.split("\n")) {
    const m = /^\S+ - (\S+) \[[^\]]*\] "[^"]*" (\d{3}) /.exec(line);
    if (m && m[1] === tokenId) out[m[2]] = (out[m[2]] ?? 0) + 1;
  }
  return out;
}

async function leakedTotal(): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${METRICS_PORT}/metrics`)).text();
  const m = /^bigfleet_proxmox_leaked_volumes_total (\d+)$/m.exec(text);
  assert.ok(m, "the provider exports bigfleet_proxmox_leaked_volumes_total");
  return Number(m[1]);
}

/**
 * An operator's call that keeps one of pvedaemon's three workers busy for
 * about `seconds`: config PUTs (Administrator token), one at a time, on a
 * diskless VM made for it, whose config lock is held here, so each waits out
 * PVE's 10 s lock timeout in a worker (PVE 9 reads the config before it locks,
 * so a VMID without a VM answers at once). The provider's own bound (2 protected calls per node)
 * leaves it that worker; an operator who takes all three makes anyone's next
 * call wait in pveproxy, and past 30 s that is a 596 the provider can only
 * retry. Resolves with the answers' texts.
 */
async function holdWorkers(seconds: number): Promise<string[]> {
  const r = await rig();
  const ids = [7190];
  for (const id of ids) {
    if (await qmConfig(id) === null) {
      const made = { vmid: id, name: "bf-lane-holder", memory: 64 };
      await waitTask(await api<string>("POST", `/nodes/${r.node}/qemu`, made));
    }
  }
  const holder = new Deno.Command(r.exec, {
    args: [
      "sh",
      "-c",
      ids.map((id) => `flock -x /var/lock/qemu-server/lock-${id}.conf sleep ${seconds + 12} &`)
        .join(" ") + " wait",
    ],
    stdout: "null",
    stderr: "null",
  }).spawn();
  const end = Date.now() + seconds * 1000;
  const answers: string[] = [];
  await Promise.all(ids.map(async (id) => {
    while (Date.now() < end) {
      answers.push(
        await api("PUT", `/nodes/${r.node}/qemu/${id}/config`, { description: "x" }).then(
          () => "ok",
          (e) => e instanceof RigApiError ? `${e.status} ${e.text}` : String(e),
        ),
      );
    }
  }));
  await holder.status;
  return answers;
}

laneTest(
  "3 Creates at once while an operator's call holds a pvedaemon worker on a VM lock: each reaches IDLE on its own VM; the provider's ≤ 2 calls leave the operator's worker free, so pveproxy answered the token no 596",
  async () => {
    const { hs } = await harness();
    const id = await laneIdentity("default");
    const mark = Number((await run("sh", "-c", "wc -l < /var/log/pveproxy/access.log")).trim());
    const held = holdWorkers(25);
    const made = await Promise.all([0, 1, 2].map((i) => createIdle(hs, machine(i))));
    const statuses = await statusesSince(mark, id.tokenId);
    const answers = await held;
    const timedOut = answers.filter((a) => /^500 can't lock file .* - got timeout$/.test(a));
    assert.ok(timedOut.length >= 2, `the operator's calls held a worker: ${answers.join("; ")}`);
    assert.equal(new Set(made.map((m) => m.vmid)).size, 3, "three VMs");
    const pool = await markersInPool(id.pool);
    for (const [i, m] of made.entries()) {
      assert.deepEqual(pool.get(machine(i)), [m.vmid], `one VM for ${machine(i)}`);
      assert.equal((await hs.get(machine(i))).last_error, "");
    }
    assert.equal(statuses["596"] ?? 0, 0, `answers by status: ${JSON.stringify(statuses)}`);
  },
);

laneTest(
  "a disk destroy cannot free: Delete ends SPECULATIVE with the VM gone, the leaked volume logged and counted in bigfleet_proxmox_leaked_volumes_total",
  async () => {
    const { hs, p } = await harness();
    const m = await hs.get(machine(0));
    assert.equal(m.state, MachineState.IDLE, "the burst test left it IDLE");
    const vmid = vmidOf(m.host?.ref);
    const volid = `local:${vmid}/vm-${vmid}-disk-0.qcow2`;
    const file = `/var/lib/vz/images/${vmid}/vm-${vmid}-disk-0.qcow2`;
    assert.equal(await leakedTotal(), 0);
    // The guest runs from its initramfs and never writes the disk, so it may be immutable now.
    await run("chattr", "+i", file);
    try {
      await hs.delete(machine(0));
      const gone = await hs.mustReach(machine(0), MachineState.SPECULATIVE, 120_000, 100);
      assert.equal(gone.last_error, "");
      assert.equal(await qmConfig(vmid), null, `VM ${vmid} is gone`);
      assert.deepEqual(await volumesOf(vmid), [volid], "the disk stayed");
      const leaks = p.stderr().split("\n").filter((l) => l.includes("it is leaked"));
      assert.equal(leaks.length, 1, leaks.join("\n"));
      assert.match(
        leaks[0],
        new RegExp(
          `${volid} of destroyed VM ${vmid} on pve could not be freed \\(the token may not ` +
            "delete volumes there \\(Datastore\\.Allocate on /storage/local\\).*\\); it is leaked",
        ),
      );
      assert.equal(await leakedTotal(), 1);
    } finally {
      await exec(["chattr", "-i", file]);
      await exec(["pvesm", "free", volid]);
    }
  },
);

laneTest("burst: Delete the others, stop the provider", async () => {
  const h = provider.started();
  if (h !== undefined) {
    const left = [];
    for (const i of [0, 1, 2]) {
      const m = await h.get(machine(i));
      if (m.state === MachineState.IDLE) left.push(machine(i));
    }
    await Promise.all(left.map((m) => h!.delete(m)));
    for (const m of left) await h.mustReach(m, MachineState.SPECULATIVE, 120_000, 100);
  }
  await provider.stop();
  await sweepPools();
  await destroyVm(7190);
});
