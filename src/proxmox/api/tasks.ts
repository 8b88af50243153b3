// Worker tasks (UPIDs): parse them and poll them to completion on the node
// that runs them. `OK` and `WARNINGS: n` are success, as PVE itself counts
// them (docs/proxmox-notes.md "Worker tasks").
//
// A task is read with the token that started it (the UPID names it): any
// other token without Sys.Audit on the node gets 403. When no token this
// process knows may read it (its token was removed after a rotation), the
// wait follows what the task does in the cluster instead, as its caller
// says that reads (docs/credentials.md#rotating-the-token).

import { getLogger } from "@logtape/logtape";
import { BackendError } from "../../kit/backend.ts";
import {
  isStorageProblem,
  ProxmoxApiError,
  TaskFailedError,
  TaskUnreadableError,
} from "./errors.ts";
import type { ApiClient } from "./client.ts";
import { type Backoff, pollUntil } from "../../async/poll.ts";

const log = getLogger(["bigfleet", "proxmox"]);

export interface Upid {
  raw: string;
  node: string;
  type: string;
  id: string;
  /** Who started it: for a token, its whole id (`USER@REALM!TOKENID`). */
  user: string;
}

const UPID_RE =
  /^UPID:([a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?):[0-9A-Fa-f]{8}:[0-9A-Fa-f]{8,9}:[0-9A-Fa-f]{8}:([^:\s/]+):([^:\s/]*):([^:\s/]+):$/;

export function parseUpid(raw: unknown): Upid {
  if (typeof raw !== "string") throw new BackendError(`expected a task UPID, got ${typeof raw}`);
  const m = UPID_RE.exec(raw);
  if (!m) throw new BackendError(`malformed task UPID ${JSON.stringify(raw.slice(0, 120))}`);
  return { raw, node: m[1], type: m[2], id: m[3], user: m[4] };
}

export function isTaskSuccess(exitstatus: string): boolean {
  return exitstatus === "OK" || /^WARNINGS: \d+$/.test(exitstatus);
}

/** What a task did, as the cluster shows it: its work done, failed (why), or not yet known. */
export type Effect = "done" | { failed: string } | undefined;

/** How to wait for one task. */
export interface TaskWait {
  /** What the task does, for its errors: `destroy of VM 101`. */
  what: string;
  timing: Backoff;
  /**
   * What the task's work looks like in the cluster (a start: the VM runs),
   * read instead of the task when no token this process knows may read it.
   */
  effect: (signal: AbortSignal) => Promise<Effect>;
}

/** A read of a task refused to every token this process knows: 403 (not its owner), 401 (removed). */
export function taskUnreadable(err: unknown): boolean {
  return err instanceof ProxmoxApiError && (err.status === 403 || err.status === 401);
}

/**
 * Poll `GET /nodes/{upid node}/tasks/{upid}/status` until `stopped`, as the
 * task's own token. Resolves with the exit status on success; throws
 * TaskFailedError with the task's own error text otherwise. Transient read
 * failures are retried by the client. Once the task cannot be read, its
 * effect decides: "OK" when done, TaskUnreadableError when it failed.
 */
export async function waitTask(
  api: ApiClient,
  rawUpid: unknown,
  wait: TaskWait,
  signal: AbortSignal,
): Promise<string> {
  const upid = parseUpid(rawUpid);
  // The UPID's characters (`:`, `@`, `!`) are legal in a path segment; send it raw like PVE's own UI.
  const path = `/nodes/${upid.node}/tasks/${upid.raw}/status`;
  const followed = api.tokens.follow(upid.user);
  /** Why the task cannot be read, once it cannot. */
  let unreadable: string | null = null;
  try {
    return await pollUntil(signal, wait.timing, async () => {
      if (unreadable === null) {
        try {
          const st = await api.get<Record<string, unknown>>(path, undefined, signal, {
            as: upid.user,
          });
          return exitOf(st, wait.what);
        } catch (err) {
          if (!taskUnreadable(err)) throw err;
          unreadable = (err as Error).message;
          log.info(
            "task {upid} ({what}) cannot be read with any token this process knows ({error}); " +
              "following what it does in the cluster instead",
            { upid: upid.raw, what: wait.what, owner: upid.user, error: unreadable },
          );
        }
      }
      const seen = await wait.effect(signal);
      if (seen === undefined) return undefined;
      if (seen === "done") return "OK";
      throw new TaskUnreadableError(
        `${wait.what} failed: ${seen.failed} (its task could not be read: ${unreadable})`,
      );
    });
  } finally {
    followed();
  }
}

/** A task's exit status once it stopped (undefined while it runs); a failure is thrown. */
function exitOf(st: Record<string, unknown> | null, what: string): string | undefined {
  if (st?.status !== "stopped") return undefined;
  const exit = String(st.exitstatus ?? "").trim();
  if (isTaskSuccess(exit)) return exit;
  const kind = isStorageProblem(exit) ? " (storage problem)" : "";
  throw new TaskFailedError(
    exit,
    `${what} failed${kind}: ${exit === "" ? "task stopped without an exit status" : exit}`,
  );
}

/** The lines of a task's log (`GET /nodes/{upid node}/tasks/{upid}/log`), in order, read as its owner. */
export async function readTaskLog(
  api: ApiClient,
  rawUpid: unknown,
  signal: AbortSignal,
): Promise<string[]> {
  const upid = parseUpid(rawUpid);
  const lines = await api.get<unknown[]>(
    `/nodes/${upid.node}/tasks/${upid.raw}/log`,
    { start: 0, limit: 10_000 },
    signal,
    { as: upid.user },
  );
  return (Array.isArray(lines) ? lines : []).map((l) => String((l as { t?: unknown })?.t ?? ""));
}
