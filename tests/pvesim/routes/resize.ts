// PUT /nodes/{node}/qemu/{vmid}/resize (VM.Config.Disk): the schema, then
// resize.ts's update. Since PVE 8.0 (qemu-server) the call forks a `resize`
// task and answers its UPID, every refusal but the parameters' and the
// permission's then being the task's exit status; before 8.0 it answered
// `null` and refused with a 500 at once.

import { ApiError, TaskFailure } from "../errors.ts";
import { NODE, type Params, rejectSkiplock, VMID } from "../params.ts";
import { resizeDisk, type ResizeRequest } from "../resize.ts";
import type { Route, RouteCtx } from "../router.ts";
import { checkNode } from "./nodes.ts";
import { vmCheck, vmPerm } from "./qemu.ts";

/** qemu-server valid_drive_names, in its order (the `disk` enumeration). */
const DRIVE_NAMES = [
  ...Array.from({ length: 4 }, (_, i) => `ide${i}`),
  ...Array.from({ length: 6 }, (_, i) => `sata${i}`),
  ...Array.from({ length: 31 }, (_, i) => `scsi${i}`),
  ...Array.from({ length: 16 }, (_, i) => `virtio${i}`),
  "efidisk0",
  "tpmstate0",
];

function request(p: Params): ResizeRequest {
  return {
    node: p.node as string,
    vmid: p.vmid as number,
    disk: p.disk as string,
    size: p.size as string,
    digest: p.digest as string | undefined,
  };
}

function handle({ core, params, authid }: RouteCtx): string | null {
  rejectSkiplock(params);
  checkNode(core, params.node as string);
  const r = request(params);
  if (Number(core.pveVersion.split(".")[0]) < 8) {
    resizeDisk(core, r);
    return null;
  }
  return core.tasks.start(r.node, "resize", String(r.vmid), authid, async () => {
    await core.timers.sleep(core.state.timing.taskMs);
    try {
      resizeDisk(core, r);
    } catch (e) {
      throw new TaskFailure(e instanceof ApiError ? e.message : String(e));
    }
  }).upid;
}

export const resizeRoutes: Route[] = [
  {
    method: "PUT",
    pattern: "/nodes/{node}/qemu/{vmid}/resize",
    schema: {
      node: NODE,
      vmid: VMID,
      skiplock: { type: "boolean", optional: true },
      disk: { type: "string", enum: DRIVE_NAMES },
      size: {
        type: "string",
        format: (v) =>
          /^\+?\d+(\.\d+)?[KMGT]?$/.test(v) ? null : "value does not match the regex pattern",
      },
      digest: { type: "string", optional: true, maxLength: 40 },
    },
    perm: vmPerm("VM.Config.Disk"),
    check: vmCheck("VM.Config.Disk"),
    handler: handle,
  },
];
