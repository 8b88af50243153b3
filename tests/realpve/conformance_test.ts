// Conformance behaviours on the real PVE: the provider process with the real
// backend and the setup-token.sh token against the rig, real VMs of our own
// image. Each behaviour is a machine lifecycle (a real clone and boot, tens of
// seconds under TCG), so only those that exercise the backend run here:
//
//   baseline CreateIdempotent: a repeated Create is answered from the kit and
//     the backend clones once;
//   B401 (16 parallel Creates): a burst makes one clone, never a second VM
//     for the machine;
//   B101: 4 Configure/Drain cycles on one VM (bootstrap, readiness gate and
//     kubectl drain, each four times).
//
// The rest (field shape, fencing, List, errors, properties) never reaches the
// backend beyond these and runs on the fake and the simulator. The upstream
// baseline's FullLifecycle and DeleteIdempotent carry fixed budgets (30 s for
// a whole lifecycle, 10 s for Create to IDLE) that a TCG guest on a busy
// 2-core machine does not meet, so they stay on the simulator lane. After each
// behaviour every VM in the lane's pool is checked to carry a distinct
// machine id (one VM per machine) and then removed, so at most one or two
// guests run at a time.

import assert from "node:assert/strict";
import { defineConformanceSuite } from "../conformance/suite.ts";
import { laneIdentity, providerFlags, sweepPools } from "./lane.ts";
import { api, rig, SKIP } from "./rig.ts";
import { startProvider } from "../harness/mod.ts";

const RUN = new Set([
  "baseline CreateIdempotent",
  "B401",
  "B101",
]);

/** Machine ids of the VMs in the pool, from their markers. */
async function markersInPool(pool: string): Promise<string[]> {
  const r = await rig();
  const p = await api<{ members: { vmid?: number; type: string }[] }>("GET", `/pools/${pool}`);
  const ids: string[] = [];
  for (const m of p.members) {
    if (m.type !== "qemu" || m.vmid === undefined) continue;
    const c = await api<{ description?: string }>("GET", `/nodes/${r.node}/qemu/${m.vmid}/config`);
    ids.push(/"machine_id":"([^"]+)"/.exec(c.description ?? "")?.[1] ?? `(VM ${m.vmid})`);
  }
  return ids.sort();
}

defineConformanceSuite("realpve", async () => {
  await sweepPools();
  const id = await laneIdentity("default");
  return await startProvider({
    args: await providerFlags(id, {
      provider: "certify",
      seed: 16,
      // The conformance blob is no script: the guest's kubeadm joins with it as its config.
      extra: ['--bootstrap-exec=/bin/sh,-c,kubeadm join --config "$0"'],
    }),
    readyTimeoutMs: 60_000,
  });
}, {
  only: (b) => RUN.has(b.id),
  ignore: SKIP !== null,
  harness: { settleMs: 180_000 },
  async after() {
    const id = await laneIdentity("default");
    const ids = await markersInPool(id.pool);
    assert.deepEqual(ids, [...new Set(ids)], "one VM per machine");
    await sweepPools();
  },
});
