// The wait for a guest agent ends as soon as the VM is no longer running
// (it crashed, or someone stopped it): retrying for minutes cannot help.

import assert from "node:assert/strict";
import { waitFor } from "../server/helpers.ts";
import { FAST, rig, slot } from "./helpers.ts";

Deno.test("the agent wait stops at once when the VM stops under it", async () => {
  await using r = await rig({}, {}, { timing: { ...FAST, agentTimeoutMs: 30_000 } });
  r.sim.faults.agentDown = true;
  const s = slot("pve1");
  const created = r.backend.create(s, AbortSignal.timeout(25_000)).then(
    () => null,
    (e: Error) => e,
  );
  const ping = await waitFor(
    "the first agent ping",
    () => r.sim.requests.find((q) => q.path.endsWith("/agent/ping")),
  );
  const vmid = Number(ping.path.split("/")[4]);
  r.sim.stopVmOutOfBand(vmid);
  const stoppedAt = Date.now();
  const err = await created;
  assert.ok(err !== null, "Create failed");
  assert.ok(Date.now() - stoppedAt < 3000, `gave up ${Date.now() - stoppedAt} ms after the stop`);
  assert.match(err.message, new RegExp(`VM ${vmid} on pve1 is not running`));
  assert.match(err.message, /guest agent/);
});
