// pvedaemon's worker pool and pveproxy's proxy timeout (docs/proxmox-notes.md
// "pvedaemon's three workers"). A `protected` API method is run by pveproxy
// only after proxying it to the node's pvedaemon (pve-http-server
// HTTPServer.pm), whose `max_workers` is 3 (Service/pvedaemon.pm) and whose
// handlers run synchronously: a call waits for a free worker and holds it
// for as long as its handler runs. pveproxy gives up after 30 s without an
// answer (APIServer/AnyEvent.pm proxy_request, `timeout => 30`) and the
// client gets 596; the request stays queued and is still run once a worker
// takes it, so the operation may happen after the 596.

import type { Timers } from "./tasks.ts";

/**
 * GETs below /nodes/{node} that pveproxy answers itself (not `protected` in
 * qemu-server's API2/Qemu.pm, pve-manager's API2/Nodes.pm and API2/Tasks.pm).
 * Every other method there, and every other GET, is protected.
 */
const UNPROTECTED_GETS = new Set([
  "/nodes/{node}/status",
  "/nodes/{node}/version",
  "/nodes/{node}/tasks",
  "/nodes/{node}/qemu/{vmid}/config",
  "/nodes/{node}/qemu/{vmid}/pending",
  "/nodes/{node}/qemu/{vmid}/status",
]);

/** Cluster-wide methods that are protected (run by the pvedaemon of the node asked). */
const PROTECTED_CLUSTER = new Set(["GET /cluster/status"]);

/** Whether a route's method is `protected`, i.e. runs in a pvedaemon worker. */
export function isProtected(method: string, pattern: string): boolean {
  if (!pattern.startsWith("/nodes/{node}")) return PROTECTED_CLUSTER.has(`${method} ${pattern}`);
  if (method !== "GET") return true;
  return pattern !== "/nodes/{node}" && !UNPROTECTED_GETS.has(pattern);
}

/** One node's pvedaemon: `size` workers, callers served first come, first served. */
export class WorkerPool {
  #busy = 0;
  #queue: (() => void)[] = [];
  /** The longest a call has waited for a worker so far (ms). */
  maxWaitMs = 0;
  /** The most workers busy at once so far. */
  peakBusy = 0;

  constructor(readonly size: number) {}

  get busy(): number {
    return this.#busy;
  }

  get queued(): number {
    return this.#queue.length;
  }

  /** Run `fn` in a worker; `onStart` gets how long the call waited for it. */
  async run<T>(fn: () => Promise<T>, onStart?: (waitedMs: number) => void): Promise<T> {
    const t0 = Date.now();
    if (this.#busy >= this.size) await new Promise<void>((go) => this.#queue.push(go));
    else this.#busy++;
    this.peakBusy = Math.max(this.peakBusy, this.#busy);
    const waited = Date.now() - t0;
    this.maxWaitMs = Math.max(this.maxWaitMs, waited);
    onStart?.(waited);
    try {
      return await fn();
    } finally {
      const next = this.#queue.shift();
      // The worker passes straight to the next caller; otherwise it is free again.
      if (next) next();
      else this.#busy--;
    }
  }
}

/** What pveproxy answers: the handler's own outcome, or its 596 after `timeoutMs`. */
export type Proxied<T> = { timedOut: false; value: T } | { timedOut: true };

/**
 * Run a protected call the way pveproxy proxies it: in a worker of `pool`,
 * giving up after `timeoutMs` (queue wait plus handler). A call given up on
 * stays queued and runs later; its outcome is dropped.
 */
export async function proxied<T>(
  timers: Timers,
  pool: WorkerPool,
  timeoutMs: number,
  fn: () => Promise<T>,
  onStart?: (waitedMs: number) => void,
): Promise<Proxied<T>> {
  const work = pool.run(fn, onStart);
  const timer = timers.cancelable(timeoutMs);
  try {
    return await Promise.race([
      work.then((value) => ({ timedOut: false as const, value })),
      timer.done.then(() => {
        work.catch(() => {});
        return { timedOut: true as const };
      }),
    ]);
  } finally {
    timer.cancel();
  }
}
