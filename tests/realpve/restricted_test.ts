// The provider in restricted setups a real datacenter has, on the real PVE,
// with the pool-only token (setup-token.sh --no-audit-all-vms: no VM.Audit on
// /vms, no Sys.Modify on /): a tag policy in datacenter.cfg (user-tag-access)
// that lets such a token set only listed tags, and a Delete whose destroy
// takes the VMID out of the pool the token's rights on it came through, so
// the VMID answers 403 afterwards instead of "does not exist".

import assert from "node:assert/strict";
import { Harness, MachineState, type ProviderProcess } from "../harness/mod.ts";
import {
  createIdle,
  fileProvider,
  laneIdentity,
  laneMachine,
  qmConfig,
  startLaneProvider,
  sweepPools,
  vmidOf,
  volumesOf,
  withTagPolicy,
} from "./lane.ts";
import { api, laneTest, rig, RigApiError, run } from "./rig.ts";
import { TEMPLATE_VMID } from "./template.ts";

const PROVIDER = "restricted";
const machine = (i: number) => laneMachine(i, PROVIDER);

const provider = fileProvider(async () => {
  await sweepPools();
  const id = await laneIdentity("no-audit-all-vms");
  // A per-machine tag as well as the fixed one: the policy below refuses it.
  return await startLaneProvider(id, {
    provider: PROVIDER,
    seed: 2,
    extra: ["--proxmox-tags=bigfleet,@machine"],
  });
});
const harness = provider.get;

laneTest(
  "tag policy user-allow=list (bigfleet only), pool-only token: Create reaches IDLE adding only bigfleet, the per-machine tag left out and the template's tag left on",
  async () => {
    const { hs, p } = await harness();
    await run("qm", "set", String(TEMPLATE_VMID), "--tags", "lane-template");
    try {
      await withTagPolicy("user-allow=list,user-allow-list=bigfleet", () => createAndCheck(hs, p));
    } finally {
      await run("qm", "set", String(TEMPLATE_VMID), "--delete", "tags");
    }
  },
);

async function createAndCheck(hs: Harness, p: ProviderProcess): Promise<void> {
  const { vmid } = await createIdle(hs, machine(0));
  const cfg = await qmConfig(vmid);
  assert.deepEqual(cfg?.tags.split(";").sort(), ["bigfleet", "lane-template"]);
  const tag = "bigfleet-restricted-ondemand-lane-tiny-pve-000";
  assert.match(p.stderr(), new RegExp(`does not let the token add tag '${tag}'`));
  assert.match(p.stderr(), /does not let the token remove tag 'lane-template'/);
}

laneTest(
  "pool-only token: Delete ends SPECULATIVE though the VMID answers 403 after our destroy; the VM and its disk are gone; a second Delete is a replay",
  async () => {
    const { hs } = await harness();
    const id = await laneIdentity("no-audit-all-vms");
    const r = await rig();
    let m = await hs.get(machine(0));
    if (m.state !== MachineState.IDLE) {
      await createIdle(hs, machine(1)); // the tag test did not leave one
      m = await hs.get(machine(1));
    }
    const vmid = vmidOf(m.host?.ref);
    const first = await hs.delete(m.id);
    const gone = await hs.mustReach(m.id, MachineState.SPECULATIVE, 120_000, 100);
    assert.equal(gone.host, null);
    assert.equal(gone.last_error, "");
    // What the token itself now sees of the VMID: a 403, not "does not exist".
    await assert.rejects(
      api("GET", `/nodes/${r.node}/qemu/${vmid}/config`, {}, { id: id.tokenId, secret: id.secret }),
      (e) => e instanceof RigApiError && e.status === 403,
    );
    assert.equal(await qmConfig(vmid), null, `VM ${vmid} is gone`);
    assert.deepEqual(await volumesOf(vmid), [], "its disk is gone");
    const again = await hs.delete(m.id);
    assert.equal(again.operation_id, first.operation_id, "the same operation");
    assert.equal((await hs.get(m.id)).state, MachineState.SPECULATIVE);
  },
);

laneTest("restricted: stop the provider", () => provider.stop());
