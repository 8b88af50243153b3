// The datacenter's tag policy (user-tag-access, registered-tags) against a
// token without Sys.Modify, as setup-token.sh makes it: Create works under
// every mode, the tags are --proxmox-tags (default `bigfleet`), a template
// tag the token may not remove stays, and the machine is found by its name
// and marker whatever its tags.

import assert from "node:assert/strict";
import type { SimDatacenter } from "../pvesim/mod.ts";
import { createProxmoxBackend } from "../../src/proxmox/mod.ts";
import { FAST, logLines, rig, setupTokenAcl, signal, slot, vmidOf } from "./helpers.ts";

/** A rig whose token is setup-token.sh's (no Sys.Modify), under `datacenter`, with `tags` configured. */
async function policyRig(datacenter: SimDatacenter, tags?: string[]) {
  return await rig(
    { acl: await setupTokenAcl(), datacenter },
    tags === undefined ? {} : { tags },
  );
}

const tagsOf = (r: Awaited<ReturnType<typeof rig>>, hostRef: string) =>
  r.sim.vm(vmidOf(hostRef))!.config.tags;

Deno.test("tags: by default the VM carries `bigfleet` only; the template's tags are replaced", async () => {
  await using r = await rig();
  const { hostRef } = await r.backend.create(slot("pve1"), signal());
  assert.equal(tagsOf(r, hostRef), "bigfleet");
});

Deno.test("tags: `list` allowing `bigfleet`: Create works; the template's tags the token may not remove stay", async () => {
  await using r = await policyRig({
    userTagAccess: { userAllow: "list", userAllowList: ["bigfleet"] },
  });
  const { hostRef } = await r.backend.create(slot("pve1"), signal());
  // The template's k8s;template are not in the allow-list: removing them is refused.
  assert.equal(tagsOf(r, hostRef), "bigfleet;k8s;template");
  const vm = r.sim.vm(vmidOf(hostRef))!;
  assert.equal(vm.status, "running");
  assert.equal(Number(vm.config.cores), 2, "sized");
});

Deno.test("tags: `none`: Create works with the inherited tags; each refused tag is logged once, not per Create", async () => {
  await using r = await policyRig({ userTagAccess: { userAllow: "none" } });
  const a = await r.backend.create(slot("pve1"), signal());
  const b = await r.backend.create(slot("pve1"), signal());
  for (const { hostRef } of [a, b]) assert.equal(tagsOf(r, hostRef), "k8s;template");
  const refusals = logLines.filter((l) => l.startsWith("warning") && /tag 'bigfleet'/.test(l));
  assert.equal(refusals.length, 1, refusals.join("\n"));
  assert.match(refusals[0], /user-tag-access/);
});

Deno.test("tags: `existing` refuses a fresh per-machine tag (--proxmox-tags=bigfleet,@machine)", async () => {
  await using r = await policyRig(
    { userTagAccess: { userAllow: "existing", userAllowList: ["bigfleet"] } },
    ["bigfleet", "@machine"],
  );
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  // k8s and template exist (on the template), so they may go; the machine's own tag may not come.
  assert.equal(tagsOf(r, hostRef), "bigfleet");
});

Deno.test("tags: --proxmox-tags=fleet-a,@machine sets exactly those, the per-machine tag included", async () => {
  await using r = await rig({}, { tags: ["fleet-a", "@machine"] });
  const s = slot("pve2");
  const { hostRef } = await r.backend.create(s, signal());
  assert.equal(
    tagsOf(r, hostRef),
    `bigfleet-proxmox-ondemand-pve-small-pve2-${s.machineId.slice(-3)};fleet-a`,
  );
});

Deno.test("tags: a registered tag needs Sys.Modify even under `free`: left out, Create works", async () => {
  await using r = await policyRig({ registeredTags: ["bigfleet"] });
  const { hostRef } = await r.backend.create(slot("pve1"), signal());
  assert.equal(tagsOf(r, hostRef), undefined, "the template's tags removed, bigfleet refused");
});

Deno.test("tags: no tags at all (--proxmox-tags=): adopted after a restart, described and deleted by the marker", async () => {
  await using r = await rig({}, { tags: [] });
  const s = slot("pve1");
  const first = await r.backend.create(s, signal());
  const vmid = vmidOf(first.hostRef);
  assert.equal(tagsOf(r, first.hostRef), undefined, "no tag set, the template's removed");
  // A restart without state: a new backend on the same cluster finds the VM by name and marker.
  const again = await createProxmoxBackend(r.cfg, { timing: FAST });
  try {
    const second = await again.create(s, signal());
    assert.equal(second.hostRef, first.hostRef, "adopted, not cloned again");
    assert.equal(r.sim.vms().filter((v) => !v.template).length, 1);
    const described = (await again.describe(signal())).find((d) => d.vmid === vmid);
    assert.equal(described?.machineId, s.machineId);
    await again.delete({ machineId: s.machineId, hostRef: first.hostRef }, signal());
    assert.equal(r.sim.vm(vmid), undefined);
  } finally {
    await again.close();
  }
});
