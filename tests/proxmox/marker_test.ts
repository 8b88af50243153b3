// The description marker must read back verbatim on every PVE 8.x/9.x,
// including machine ids with '%' (pve-common before 8.2 URI-unescapes the
// description when it reads the config).

import assert from "node:assert/strict";
import { buildDescription, parseMarker } from "../../src/proxmox/naming.ts";
import { rig, signal, slot, vmidOf } from "./helpers.ts";

const ODD_IDS = [
  "proxmox/OnDemand/pve.small/pve1/50%41off",
  "proxmox/OnDemand/pve.small/pve1/%25%%zz%",
  "proxmox/OnDemand/pve.small/pve1/ünï%C3%BC",
];

for (const version of ["8.1.4", "8.4.1", "9.0.3"]) {
  Deno.test(`a machine id with '%' keeps owning its VM on PVE ${version}`, async () => {
    await using r = await rig({ pveVersion: version });
    for (const machineId of ODD_IDS) {
      const s = slot("pve1", { machineId });
      const { hostRef } = await r.backend.create(s, signal());
      const m = { machineId, hostRef };
      // Configure and Delete check the marker before touching the VM.
      await r.backend.configure(m, { clusterId: "c", bootstrap: new Uint8Array([1]) }, signal());
      const described = (await r.backend.describe(signal())).find((v) => v.hostRef === hostRef);
      assert.equal(described?.machineId, machineId);
      await r.backend.delete(m, signal());
      assert.equal(r.sim.vm(vmidOf(hostRef)), undefined, `${machineId} deleted`);
    }
  });
}

Deno.test("the marker text carries no '%' at all", () => {
  for (const id of ODD_IDS) {
    const d = buildDescription(id, "op%41");
    assert.ok(!d.includes("%"), d);
    assert.deepEqual(parseMarker(d), { machineId: id, operationId: "op%41" });
  }
});
