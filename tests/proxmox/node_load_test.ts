// A node's pvedaemon has three workers (docs/proxmox-notes.md "pvedaemon's
// three workers"): the provider keeps at most --proxmox-calls-per-node (2)
// of its own protected calls in flight per node, so one worker stays free
// for everyone else, and pings a booting VM's agent at most every 3 s.

import assert from "node:assert/strict";
import { DEFAULT_TIMING } from "../../src/proxmox/timing.ts";
import { FAST, rig, signal, slot } from "./helpers.ts";

/** Booting guests whose agent pings hold a worker, and short calls in between. */
const BUSY_NODE = {
  timing: {
    qgaPingTimeoutMs: 150,
    agentBootMs: 700,
    daemonCallMs: 5,
    cloneMs: 200,
    cloneNamelessMs: 80,
  },
};

Deno.test("protected calls in flight per node stay at 2 of pvedaemon's 3 workers", async () => {
  await using r = await rig(BUSY_NODE);
  const created = await Promise.all(
    Array.from({ length: 6 }, () => r.backend.create(slot("pve1"), signal())),
  );
  assert.equal(created.length, 6);
  const pool = r.sim.workerPools().pve1;
  // Never the third worker, so no call of ours ever queued at pvedaemon.
  assert.ok(pool.peakBusy <= 2, `pve1's pvedaemon: ${JSON.stringify(pool)}`);
  assert.ok(!r.sim.requests.some((q) => q.status === 596));
});

Deno.test("--proxmox-calls-per-node bounds the calls in flight per node", async () => {
  await using r = await rig(BUSY_NODE, { callsPerNode: 1 });
  await Promise.all(Array.from({ length: 4 }, () => r.backend.create(slot("pve1"), signal())));
  assert.equal(r.sim.workerPools().pve1.peakBusy, 1);
});

Deno.test("a booting VM's agent is pinged at most every 3 s by default", async () => {
  const { agentPollMs: _fast, ...timing } = FAST;
  await using r = await rig(
    { timing: { agentBootMs: 3500, qgaPingTimeoutMs: 100 } },
    {},
    { timing: { ...timing, agentTimeoutMs: 15_000 } },
  );
  const { hostRef } = await r.backend.create(slot("pve2"), signal());
  const pings = r.sim.requests
    .filter((q) => q.path === `/nodes/pve2/qemu/${hostRef.split("/")[1]}/agent/ping`)
    .map((q) => q.at);
  assert.ok(pings.length >= 2, `the agent was pinged while it booted: ${pings.length}`);
  for (let i = 1; i < pings.length; i++) {
    assert.ok(pings[i] - pings[i - 1] >= 3000, `pings ${pings[i] - pings[i - 1]} ms apart`);
  }
  assert.ok(DEFAULT_TIMING.agentPollMs >= 3000);
});
