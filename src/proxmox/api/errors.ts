// Error types for the Proxmox client. Messages are built only from the method,
// the path, the status and server-provided text: never from request headers or
// bodies, so neither the token secret nor a bootstrap blob can end up in them.

import { BackendError } from "../../kit/backend.ts";

/** An HTTP-level failure from the Proxmox API (any non-2xx, or an unusable 2xx body). */
export class ProxmoxApiError extends BackendError {
  override name = "ProxmoxApiError";
  constructor(
    readonly method: string,
    readonly path: string,
    readonly status: number,
    /** The server's own text (JSON `message` or reason phrase); "" on legacy servers over fetch. */
    readonly serverText: string,
    message: string,
  ) {
    super(message);
  }
}

/** The peer failed TLS verification (wrong CA, hostname or fingerprint). Never retried. */
export class TlsTrustError extends BackendError {
  override name = "TlsTrustError";
}

/** A connection-level failure (refused, reset, timed out) before an HTTP status arrived. */
export class TransportError extends BackendError {
  override name = "TransportError";
}

/** A worker task ended with an error exit status. */
export class TaskFailedError extends BackendError {
  override name = "TaskFailedError";
  constructor(readonly exitstatus: string, message: string) {
    super(message);
  }
}

/**
 * A task no token this process knows may read (another token started it and
 * was removed since), whose effect in the cluster says it did not do its
 * work, or cannot say whether it did (api/tasks.ts).
 */
export class TaskUnreadableError extends BackendError {
  override name = "TaskUnreadableError";
}

/** Statuses that mean "the proxy chain failed; the operation may or may not have happened". */
const TRANSIENT_STATUSES = new Set([502, 503, 504, 595, 596, 597, 599]);

/** True for failures worth retrying an idempotent call on. */
export function isTransient(err: unknown): boolean {
  if (err instanceof ProxmoxApiError) return TRANSIENT_STATUSES.has(err.status);
  return err instanceof TransportError;
}

/**
 * pvedaemon's words for a worker it never started: fork_worker forks the
 * task, then waits for the child's UPID on a pipe. A read that gets nothing
 * (cut short by a signal, as when another worker ends under load), a child
 * that fails its own setup, or a failed fork answers 500 before the task's
 * work runs; the child is never told to go on (docs/proxmox-notes.md
 * "A worker that never started"). Nothing happened, so the call may be sent again.
 */
const WORKER_NOT_STARTED_RE =
  /got no worker upid - start worker failed|got strange worker upid .* - start worker failed|^starting worker failed: |^unable to fork worker/;

/** Whether a call was refused by pvedaemon before its worker ran (safe to send again). */
export function workerNeverStarted(err: unknown): boolean {
  return err instanceof ProxmoxApiError && err.status === 500 &&
    WORKER_NOT_STARTED_RE.test(err.serverText);
}

/**
 * PVE's own words for "no such VM on this node" (qemu-server's config
 * loader). Anchored on the config file: a bare "does not exist" also ends
 * storage, volume, snapshot and pool errors (docs/proxmox-notes.md "Error texts").
 */
const MISSING_RE =
  /Configuration file '[^']*qemu-server\/\d+\.conf' does not exist|unable to find configuration file for VM \d+/i;

/** Texts of pve-storage failures: a storage that is gone, offline or unusable on the node. */
const STORAGE_RE =
  /\bstorage '[^']+' (?:does not exist|is not online|is not available|is disabled)|\bno such storage\b|\bstorage '[^']+' does not support/i;

/** Whether a server or task text is a storage problem (reported as one, never as "VM missing"). */
export function isStorageProblem(text: string): boolean {
  return STORAGE_RE.test(text);
}

/**
 * Whether an error says the VM is missing. Proxmox answers 500 (never 404) with
 * `Configuration file … does not exist`. "unknown" means a legacy 500 without
 * any text (fetch cannot read the reason phrase): the caller must decide by
 * other evidence.
 */
export function missingVerdict(err: unknown): "missing" | "present" | "unknown" {
  if (err instanceof TaskFailedError) {
    return MISSING_RE.test(err.exitstatus) ? "missing" : "present";
  }
  if (!(err instanceof ProxmoxApiError)) return "present";
  if (err.status !== 500) return "present";
  if (err.serverText === "") return "unknown";
  return MISSING_RE.test(err.serverText) ? "missing" : "present";
}

/** The text to match server conditions on: server text or task exit status. */
export function serverTextOf(err: unknown): string {
  if (err instanceof ProxmoxApiError) return err.serverText;
  if (err instanceof TaskFailedError) return err.exitstatus;
  return "";
}

/**
 * Whether a refusal means what `re` matches: by the server's text (HTTP or
 * task), or, for a legacy server's bare 500 (no text over fetch), by
 * `evidence` read from the cluster.
 */
export async function refusedWith(
  err: unknown,
  re: RegExp,
  evidence: () => Promise<boolean>,
): Promise<boolean> {
  const text = serverTextOf(err);
  if (text !== "") return re.test(text);
  if (!(err instanceof ProxmoxApiError) || err.status !== 500) return false;
  try {
    return await evidence();
  } catch {
    // No evidence either way: not this refusal; the caller goes on with the original error.
    return false;
  }
}
