// Volumes a destroy left behind. destroy_vm only warns when it cannot free
// a volume (`Could not remove disk '<volid>', check manually: <error>`: an
// RBD image still watched right after a hard stop, an LV still open), and
// its task still ends OK (qemu-server before 9.1.19 warns with plain Perl
// `warn`, which the task does not count) or, from 9.1.19 on, `WARNINGS: n`
// with the line prefixed `WARN: `. So the log of the destroy task is read,
// each volume it names is freed again a bounded number of times (storage
// content DELETE, which needs Datastore.Allocate on the storage), and what
// stays is logged once and counted (docs/proxmox-notes.md "Destroy and
// leaked volumes"). A log no token this process knows may read (its token
// was retired) is replaced by a look at each volume the destroyed config
// owned. The Delete succeeds either way: the VM is gone.

import { getLogger } from "@logtape/logtape";
import type { ProxmoxContext } from "../context.ts";
import { ProxmoxApiError, serverTextOf } from "../api/errors.ts";
import { readTaskLog, taskUnreadable, waitTask } from "../api/tasks.ts";
import { pollWaits } from "../../async/poll.ts";
import { sleep } from "../../async/sleep.ts";
import { ownedVolumes } from "./drives.ts";
import { isPermissionError, type VmAt, type VmConfig } from "./vm.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/** destroy_vm's warning (`WARN: ` from qemu-server 9.1.19); the sweep's `unlink …` line names no volume. */
const UNFREED_RE = /^(?:WARN: )?Could not remove disk '([^']+)', check manually: (.*)$/;

/** The volumes a destroy task's log says it could not free, each once, with the error. */
export function unfreedVolumes(lines: readonly string[]): { volid: string; error: string }[] {
  const out = new Map<string, string>();
  for (const line of lines) {
    const m = UNFREED_RE.exec(line.trim());
    if (m && !out.has(m[1])) out.set(m[1], m[2].trim());
  }
  return [...out].map(([volid, error]) => ({ volid, error }));
}

/**
 * Free what the destroy task `upid` of VM `vmid` left behind; report what
 * stays. `destroyed` is the config it destroyed (null when not known): its
 * volumes are looked at when the task's log cannot be read.
 */
export async function freeLeftovers(
  ctx: ProxmoxContext,
  at: VmAt,
  upid: string,
  destroyed: VmConfig | null,
  signal: AbortSignal,
): Promise<void> {
  const { node, vmid } = at;
  let left: { volid: string; error: string }[];
  try {
    left = unfreedVolumes(await readTaskLog(ctx.api, upid, signal));
  } catch (err) {
    if (signal.aborted) throw err;
    if (!taskUnreadable(err) || destroyed === null) {
      log.warn(
        "could not read the log of the destroy of VM {vmid} ({error}); disks it failed to " +
          "free, if any, are not known",
        { vmid, node, upid, error: (err as Error).message },
      );
      return;
    }
    left = await stillThere(ctx, at, destroyed, (err as Error).message, signal);
  }
  for (const { volid, error } of left) {
    log.info("the destroy of VM {vmid} could not free {volid} ({error}); retrying", {
      vmid,
      node,
      volid,
      error,
    });
    await freeVolume(ctx, at, volid, error, signal);
  }
}

/**
 * Instead of the destroy's log: the volumes the destroyed config owned that
 * are still on their storage. One that cannot be looked at is said once.
 */
async function stillThere(
  ctx: ProxmoxContext,
  at: VmAt,
  config: VmConfig,
  why: string,
  signal: AbortSignal,
): Promise<{ volid: string; error: string }[]> {
  const { node, vmid } = at;
  const unknown: string[] = [];
  const left: { volid: string; error: string }[] = [];
  for (const { volid } of ownedVolumes(config, vmid)) {
    const state = await volumeState(ctx, node, volid, signal);
    if (state === "present") left.push({ volid, error: "still there after the destroy" });
    else if (state !== "gone") unknown.push(`${volid} (${state})`);
  }
  if (unknown.length > 0) {
    log.warn(
      "the log of the destroy of VM {vmid} cannot be read ({error}) and whether it freed " +
        "{volumes} cannot be seen either; check with pvesm list <storage> --vmid {vmid} on {node}",
      { vmid, node, error: why, volumes: unknown.join(", ") },
    );
  }
  return left;
}

/** pve-storage's words for a volume that is not there (a file storage's, an RBD image's). */
const VOLUME_MISSING_RE =
  /volume_size_info on '[^']+' failed - no format|No such file or directory/;

/**
 * Whether `volid` is still on its storage (`GET …/storage/<s>/content/<volid>`,
 * which needs Datastore.Allocate there, or Datastore.Audit plus
 * VM.Config.Disk on its VM): "present", "gone", or why it cannot be told.
 */
export async function volumeState(
  ctx: ProxmoxContext,
  node: string,
  volid: string,
  signal: AbortSignal,
): Promise<"present" | "gone" | string> {
  const storage = volid.slice(0, volid.indexOf(":"));
  try {
    const path = `/nodes/${node}/storage/${storage}/content/${encodeURIComponent(volid)}`;
    await ctx.api.get(path, undefined, signal);
    return "present";
  } catch (err) {
    if (signal.aborted) throw err;
    const text = serverTextOf(err);
    if (err instanceof ProxmoxApiError && err.status === 500 && VOLUME_MISSING_RE.test(text)) {
      return "gone";
    }
    return text || (err as Error).message;
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
        await waitTask(api, upid, {
          what: `freeing ${volid}`,
          timing: timing.task,
          effect: async (signal) => {
            const state = await volumeState(ctx, node, volid, signal);
            return state === "gone" ? "done" : state === "present" ? undefined : { failed: state };
          },
        }, signal);
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
