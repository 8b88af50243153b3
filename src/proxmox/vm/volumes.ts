// Volumes a destroy left behind. destroy_vm only warns when it cannot free
// a volume (`Could not remove disk '<volid>', check manually: <error>`: an
// RBD image still watched right after a hard stop, an LV still open), and
// its task still ends OK (PVE 8.4 warns with plain Perl `warn`, which the
// task does not count) or `WARNINGS: n`. So the log of the destroy task is
// read, each volume it names is freed again a bounded number of times
// (storage content DELETE, which needs Datastore.Allocate on the storage),
// and what stays is logged once and counted (docs/proxmox-notes.md "Destroy
// and leaked volumes"). The Delete succeeds either way: the VM is gone.

import { getLogger } from "@logtape/logtape";
import type { ProxmoxContext } from "../context.ts";
import { serverTextOf } from "../api/errors.ts";
import { readTaskLog, waitTask } from "../api/tasks.ts";
import { pollWaits } from "../../async/poll.ts";
import { sleep } from "../../async/sleep.ts";
import { isPermissionError, type VmAt } from "./vm.ts";

const log = getLogger(["bigfleet", "proxmox"]);

const UNFREED_RE = /^Could not remove disk '([^']+)', check manually: (.*)$/;

/** The volumes a destroy task's log says it could not free, each once, with the error. */
export function unfreedVolumes(lines: readonly string[]): { volid: string; error: string }[] {
  const out = new Map<string, string>();
  for (const line of lines) {
    const m = UNFREED_RE.exec(line.trim());
    if (m && !out.has(m[1])) out.set(m[1], m[2].trim());
  }
  return [...out].map(([volid, error]) => ({ volid, error }));
}

/** Free what the destroy task `upid` of VM `vmid` left behind; report what stays. */
export async function freeLeftovers(
  ctx: ProxmoxContext,
  at: VmAt,
  upid: string,
  signal: AbortSignal,
): Promise<void> {
  const { node, vmid } = at;
  let lines: string[];
  try {
    lines = await readTaskLog(ctx.api, upid, signal);
  } catch (err) {
    if (signal.aborted) throw err;
    log.warn(
      "could not read the log of the destroy of VM {vmid} ({error}); disks it failed to free, " +
        "if any, are not known",
      { vmid, node, upid, error: (err as Error).message },
    );
    return;
  }
  for (const { volid, error } of unfreedVolumes(lines)) {
    log.info("the destroy of VM {vmid} could not free {volid} ({error}); retrying", {
      vmid,
      node,
      volid,
      error,
    });
    await freeVolume(ctx, at, volid, error, signal);
  }
}

async function freeVolume(
  ctx: ProxmoxContext,
  at: VmAt,
  volid: string,
  firstError: string,
  signal: AbortSignal,
): Promise<void> {
  const { api, timing } = ctx;
  const { node, vmid } = at;
  const storage = volid.slice(0, volid.indexOf(":"));
  const path = `/nodes/${node}/storage/${storage}/content/${encodeURIComponent(volid)}`;
  const waits = pollWaits(timing.volumeRetry);
  let error = firstError;
  for (let attempt = 0; attempt < timing.volumeAttempts; attempt++) {
    await sleep(waits.next().value, signal);
    try {
      const upid = await api.del(path, undefined, signal);
      if (upid !== null && upid !== undefined) {
        await waitTask(api, upid, `freeing ${volid}`, timing.task, signal);
      }
      log.info("freed {volid}, left behind by the destroy of VM {vmid}", { vmid, node, volid });
      return;
    } catch (err) {
      if (signal.aborted) throw err;
      error = serverTextOf(err) || (err as Error).message;
      if (isPermissionError(err)) {
        error = `the token may not delete volumes there (Datastore.Allocate on /storage/` +
          `${storage}): ${error}`;
        break;
      }
    }
  }
  log.warn(
    "{volid} of destroyed VM {vmid} on {node} could not be freed ({error}); it is leaked: " +
      "remove it by hand with pvesm free {volid} on {node}",
    { vmid, node, volid, error },
  );
  ctx.leaked(volid);
}
