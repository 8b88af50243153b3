// Worker tasks (UPIDs): parse them and poll them to completion on the node
// that runs them. `OK` and `WARNINGS: n` are success, as PVE itself counts
// them (docs/proxmox-notes.md "Worker tasks").

import { BackendError } from "../../kit/backend.ts";
import { isStorageProblem, TaskFailedError } from "./errors.ts";
import type { ApiClient } from "./client.ts";
import { type Backoff, pollUntil } from "../../async/poll.ts";

export interface Upid {
  raw: string;
  node: string;
  type: string;
  id: string;
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

/**
 * Poll `GET /nodes/{upid node}/tasks/{upid}/status` until `stopped`. Resolves
 * with the exit status on success; throws TaskFailedError with the task's own
 * error text otherwise. Transient read failures are retried by the client.
 */
export async function waitTask(
  api: ApiClient,
  rawUpid: unknown,
  what: string,
  timing: Backoff,
  signal: AbortSignal,
): Promise<string> {
  const upid = parseUpid(rawUpid);
  // The UPID's characters (`:`, `@`, `!`) are legal in a path segment; send it raw like PVE's own UI.
  const path = `/nodes/${upid.node}/tasks/${upid.raw}/status`;
  return await pollUntil(signal, timing, async () => {
    const st = await api.get<Record<string, unknown>>(path, undefined, signal);
    if (st?.status !== "stopped") return undefined;
    const exit = String(st.exitstatus ?? "").trim();
    if (isTaskSuccess(exit)) return exit;
    const kind = isStorageProblem(exit) ? " (storage problem)" : "";
    throw new TaskFailedError(
      exit,
      `${what} failed${kind}: ${exit === "" ? "task stopped without an exit status" : exit}`,
    );
  });
}

/** The lines of a task's log (`GET /nodes/{upid node}/tasks/{upid}/log`), in order. */
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
  );
  return (Array.isArray(lines) ? lines : []).map((l) => String((l as { t?: unknown })?.t ?? ""));
}
