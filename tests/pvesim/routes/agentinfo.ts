// GET /nodes/{node}/qemu/{vmid}/agent/info: qemu-ga's guest-info (its
// version and every command with `enabled`), answered like the other plain
// agent commands: `{"result": …}` once the agent is available.

import { agentWorkerMs, assertAgent } from "../agent.ts";
import { guestInfo } from "../guestcaps.ts";
import { NODE, VMID } from "../params.ts";
import type { Route } from "../router.ts";
import { openVm, vmPerm } from "./qemu.ts";

export const agentInfoRoutes: Route[] = [
  {
    method: "GET",
    pattern: "/nodes/{node}/qemu/{vmid}/agent/info",
    schema: { node: NODE, vmid: VMID },
    // PVE 8 checks VM.Monitor (PVE 9: VM.GuestAgent.Audit), like the other agent calls here.
    perm: vmPerm("VM.Monitor"),
    workerMs: ({ core, params }) =>
      agentWorkerMs(core, String(params.node), Number(params.vmid), 2),
    handler: async ({ core, params }) => {
      if (core.faults.agentSlowMs > 0) await core.timers.sleep(core.faults.agentSlowMs);
      const vm = openVm(core, params);
      assertAgent(core, vm, "guest-info");
      return guestInfo(vm);
    },
  },
];
