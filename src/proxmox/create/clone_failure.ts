// How a clone attempt ended, decided once: made, or failed in one of the
// ways the clone loop handles differently (clone.ts). The texts are PVE's
// own (docs/proxmox-notes.md "VMID allocation and clone races", "Storage
// locks"); a legacy server's bare 500 is decided by evidence read from the
// cluster instead.

import {
  isTransient,
  ProxmoxApiError,
  refusedWith,
  serverTextOf,
  TaskFailedError,
  TaskUnreadableError,
} from "../api/errors.ts";
import type { TemplateRef } from "../cluster/templates.ts";
import { type Located, readConfig, type VmAt, vmOf } from "../vm/vm.ts";
import type { ProxmoxContext } from "../context.ts";

/** One clone attempt as it ended: the VM it made, or the VMID it tried and its error. */
export type Attempt =
  | { made: Located }
  | {
    vmid: number;
    err: unknown;
    /** The clone POST itself failed (refused, or unanswered behind a proxy): no task was followed. */
    postFailed: boolean;
  };

/**
 * A clone attempt, classified: `made`; `template-locked` (nothing was made:
 * the source was locked, wait for it); `storage-locked` (vdisk_alloc timed
 * out on a storage lock: the worker removed what it made); `race-lost` (the
 * VMID is someone else's now); `ambiguous` (the POST got a proxy error, or
 * its task cannot be read any more and its VM is not found, so its clone
 * may still run); `fatal` (anything else, or a failure whose
 * retries are used up).
 */
export type CloneOutcome =
  | { kind: "made"; vm: Located }
  | { kind: "template-locked"; vmid: number; text: string }
  | { kind: "storage-locked"; vmid: number; text: string }
  | { kind: "race-lost"; vmid: number; text: string }
  | { kind: "ambiguous"; vmid: number; err: unknown }
  | { kind: "fatal"; err: unknown };

/** Which bounded retries the clone loop has left; a failure out of them is fatal. */
export interface RetriesLeft {
  /** Another clone after a storage-lock timeout. */
  storageLock: boolean;
  /** Another clone after a lost race or an ambiguous POST. */
  clone: boolean;
}

/**
 * Classify one attempt at cloning `tmpl`. The evidence is read in this
 * order, and only as far as needed: the failure's text, the template's lock
 * (a legacy server's bare 500), whether the newid exists now (the same).
 */
export async function classifyClone(
  ctx: ProxmoxContext,
  tried: Attempt,
  tmpl: TemplateRef,
  left: RetriesLeft,
  signal: AbortSignal,
): Promise<CloneOutcome> {
  if ("made" in tried) return { kind: "made", vm: tried.made };
  const { vmid, err, postFailed } = tried;
  const text = serverTextOf(err);
  // Nothing was cloned when the POST or its task met a lock on the source
  // (a backup starting between our look and the clone, the template's
  // config flock held by a `qm set`).
  const nothingMade = postFailed || err instanceof TaskFailedError;
  const said = nothingMade ? cloneFailure(text, tmpl.vmid) : null;
  if (nothingMade && (said === "template-lock" || await sourceLocked(ctx, err, tmpl, signal))) {
    return { kind: "template-locked", vmid, text };
  }
  if (said === "storage-lock" && left.storageLock) return { kind: "storage-locked", vmid, text };
  const at = { node: tmpl.node, vmid };
  const raced = said === "race" || (postFailed && await legacyRaceLost(ctx, err, at, signal));
  if (raced && left.clone) return { kind: "race-lost", vmid, text };
  // A POST without an answer, or a clone task no token this process knows may read any
  // more whose VM cannot be found: the clone may still run.
  const unknown = (postFailed && isTransient(err)) || err instanceof TaskUnreadableError;
  if (unknown && left.clone) return { kind: "ambiguous", vmid, err };
  return { kind: "fatal", err };
}

/** A config flock a clone worker gave up on: the source's (shared) or the newid's (exclusive). */
const CONFIG_FLOCK_RE = /can't lock file '[^']*\/lock-(\d+)\.conf' - got timeout/;

/** The newid exists already (docs/proxmox-notes.md "VMID allocation and clone races"). */
const EXISTS_RE = /config file already exists|File exists/i;

/** vdisk_alloc gave up on its storage's lock (docs/proxmox-notes.md "Storage locks"). */
const STORAGE_LOCK_RE =
  /can't lock file '[^']*\/pve-storage-[^']+' - got timeout|cfs-lock 'storage-[^']+' error: got lock request timeout/;

/** A source VM refusing a clone because of its config lock (`VM is locked (backup)`). */
const SOURCE_LOCKED_RE = /^VM is locked \(/;

/**
 * What a failed clone's text says: `template-lock` (the template's config
 * flock, taken shared with a 1 s timeout, was held by someone: nothing was
 * made), `race` (the newid is someone else's), `storage-lock` (vdisk_alloc
 * timed out on the storage lock: the worker removed what it made), or null.
 */
export function cloneFailure(
  text: string,
  template: number,
): "template-lock" | "race" | "storage-lock" | null {
  const flock = CONFIG_FLOCK_RE.exec(text);
  if (flock !== null) return Number(flock[1]) === template ? "template-lock" : "race";
  if (EXISTS_RE.test(text)) return "race";
  if (STORAGE_LOCK_RE.test(text)) return "storage-lock";
  return null;
}

/** Whether a refused clone POST met a lock on its source (legacy servers: by its config). */
function sourceLocked(
  ctx: ProxmoxContext,
  err: unknown,
  tmpl: TemplateRef,
  signal: AbortSignal,
): Promise<boolean> {
  return refusedWith(err, SOURCE_LOCKED_RE, async () => {
    const lock = (await readConfig(vmOf(ctx, tmpl), signal))?.lock;
    return typeof lock === "string" && lock !== "";
  });
}

/**
 * A legacy server (no JSON `message`, reason phrase unreadable over fetch)
 * answers a synchronous newid collision with a bare 500. Decide it by
 * evidence: our POST was refused, so if the newid exists now, it is someone else's.
 */
async function legacyRaceLost(
  ctx: ProxmoxContext,
  err: unknown,
  at: VmAt,
  signal: AbortSignal,
): Promise<boolean> {
  if (!(err instanceof ProxmoxApiError) || err.status !== 500 || err.serverText !== "") {
    return false;
  }
  try {
    return (await readConfig(vmOf(ctx, at), signal)) !== null;
  } catch {
    // No evidence of a race: the caller handles the refusal as the error it is.
    return false;
  }
}
