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
import { laneIdentity, markersInPool, providerFlags, sweepPools } from "./lane.ts";
import { SKIP } from "./rig.ts";
import { startProvider } from "../harness/mod.ts";

const RUN = new Set([
  "baseline CreateIdempotent",
  "B401",
  "B101",
]);

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
    const vms = [...await markersInPool(id.pool)].filter(([, v]) => v.length > 1);
    assert.deepEqual(vms, [], "one VM per machine");
    await sweepPools();
  },
});
