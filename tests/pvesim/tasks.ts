// Worker tasks: UPIDs (§6), the task registry behind
// GET /nodes/{n}/tasks/{upid}/status, and a timer helper the workers sleep on
// (close() cancels every timer so `deno test` sees no leaked ops).

import { fail, TaskFailure } from "./errors.ts";
import type { SimFaults, SimTask, TaskType } from "./types.ts";

export interface Task extends SimTask {
  pid: number;
  pstart: number;
  log: string[];
}

/**
 * Thrown by a worker that dies without a final line (killed, its node
 * rebooted): upid_read_status then reads `unexpected status`.
 */
export class TaskDied extends Error {}

const hex8 = (n: number) => n.toString(16).toUpperCase().padStart(8, "0");

export function formatUpid(
  t: Pick<Task, "node" | "pid" | "pstart" | "starttime" | "type" | "id" | "user">,
): string {
  return `UPID:${t.node}:${hex8(t.pid)}:${hex8(t.pstart)}:${
    hex8(t.starttime)
  }:${t.type}:${t.id}:${t.user}:`;
}

export interface ParsedUpid {
  node: string;
  pid: number;
  pstart: number;
  starttime: number;
  type: string;
  id: string;
  user: string;
}

/** pve-common UPID.pm decode; null when unparsable. */
export function parseUpid(s: string): ParsedUpid | null {
  const m = s.match(
    /^UPID:([a-zA-Z0-9]([a-zA-Z0-9\-]*[a-zA-Z0-9])?):([0-9A-Fa-f]{8}):([0-9A-Fa-f]{8,9}):([0-9A-Fa-f]{8}):([^:\s]+):([^:\s]*):([^:\s]+):$/,
  );
  if (!m) return null;
  return {
    node: m[1],
    pid: parseInt(m[3], 16),
    pstart: parseInt(m[4], 16),
    starttime: parseInt(m[5], 16),
    type: m[6],
    id: m[7],
    user: m[8],
  };
}

/** setTimeout bookkeeping so close() can cancel everything pending. */
export class Timers {
  #pending = new Set<ReturnType<typeof setTimeout>>();
  closed = false;

  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      if (this.closed) return; // never resolves: the worker just stops
      const id = setTimeout(() => {
        this.#pending.delete(id);
        if (!this.closed) resolve();
      }, Math.max(0, ms));
      this.#pending.add(id);
    });
  }

  /** A sleep that can be called off (its promise then never settles). */
  cancelable(ms: number): { done: Promise<void>; cancel: () => void } {
    let id: ReturnType<typeof setTimeout> | undefined;
    const done = new Promise<void>((resolve) => {
      if (this.closed) return;
      id = setTimeout(() => {
        this.#pending.delete(id!);
        if (!this.closed) resolve();
      }, Math.max(0, ms));
      this.#pending.add(id);
    });
    const cancel = () => {
      if (id === undefined) return;
      clearTimeout(id);
      this.#pending.delete(id);
    };
    return { done, cancel };
  }

  close(): void {
    this.closed = true;
    for (const id of this.#pending) clearTimeout(id);
    this.#pending.clear();
  }
}

export class TaskRegistry {
  readonly tasks = new Map<string, Task>();
  #pidCounter = 0x2a000 + Math.floor(Math.random() * 0x1000);
  // pstart is "jiffies since boot"; any plausible large number will do.
  #pstartBase = 0x1c40000 + Math.floor(Math.random() * 0x10000);

  constructor(private timers: Timers, private faults: SimFaults) {}

  /**
   * Starts a worker. `work` runs after the HTTP reply (next macrotask).
   * It may throw TaskFailure (text → exitstatus) or return a warning count.
   */
  start(
    node: string,
    type: TaskType,
    id: string,
    authid: string,
    work: (task: Task) => Promise<number | void>,
  ): Task {
    const left = this.faults.workerStartFailures[type] ?? 0;
    if (left > 0) {
      this.faults.workerStartFailures[type] = left - 1;
      throw fail("got no worker upid - start worker failed");
    }
    const pid = ++this.#pidCounter;
    const t: Task = {
      upid: "",
      node,
      pid,
      pstart: this.#pstartBase + pid,
      starttime: Math.floor(Date.now() / 1000),
      type,
      id,
      user: authid,
      status: "running",
      log: [],
    };
    t.upid = formatUpid(t);
    this.tasks.set(t.upid, t);
    this.timers.sleep(0).then(() => work(t)).then(
      (warnings) => this.#finish(t, warnings ? `WARNINGS: ${warnings}` : "OK"),
      (err) => {
        if (err instanceof TaskDied) return this.#finish(t, "unexpected status", false);
        const msg = err instanceof TaskFailure
          ? err.message
          : err instanceof Error
          ? err.message
          : String(err);
        this.#finish(t, msg.replace(/\n+$/, ""));
      },
    );
    return t;
  }

  #finish(t: Task, exitstatus: string, finalLine = true): void {
    if (!finalLine) {
      // No TASK line: the status reader finds none.
    } else if (exitstatus !== "OK" && !exitstatus.startsWith("WARNINGS")) {
      t.log.push(`TASK ERROR: ${exitstatus}`);
    } else if (exitstatus.startsWith("WARNINGS")) {
      t.log.push(`TASK ${exitstatus}`);
    } else {
      t.log.push("TASK OK");
    }
    t.status = "stopped";
    t.exitstatus = exitstatus;
  }

  /** GET …/tasks/{upid}/status data. Tokens split into user + tokenid. */
  statusJson(t: Task): Record<string, unknown> {
    const bang = t.user.indexOf("!");
    const out: Record<string, unknown> = {
      upid: t.upid,
      node: t.node,
      pid: t.pid,
      pstart: t.pstart,
      starttime: t.starttime,
      type: t.type,
      id: t.id,
      user: bang >= 0 ? t.user.slice(0, bang) : t.user,
      status: t.status,
    };
    if (bang >= 0) out.tokenid = t.user.slice(bang + 1);
    if (t.status === "stopped") out.exitstatus = t.exitstatus;
    return out;
  }

  list(): SimTask[] {
    return [...this.tasks.values()].map((t) => ({
      upid: t.upid,
      node: t.node,
      type: t.type,
      id: t.id,
      user: t.user,
      status: t.status,
      exitstatus: t.exitstatus,
      starttime: t.starttime,
    }));
  }
}
