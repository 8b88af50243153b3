// A StateStore for in-process kit tests: the memory store underneath, plus
// what a test needs to observe and control the kit through this seam only.
//
// - Every record handed over is kept (`machine(id)`, `fence(shard, id)`,
//   `writes`), so a test can tell what the kit persisted and when.
// - `until(id, state)` resolves on the write that puts a machine in a state:
//   an event, not a poll, so tests wait for background completions without
//   sleeping. Each wait has a deadline so a broken kit fails instead of hanging.
// - `hold()` / `release()` model a slow disk: while held, nothing handed over
//   is committed and `durable()` does not resolve; `release()` commits what
//   was handed over so far. Used to prove no answer goes out before its commit.

import { createMemoryStore } from "../../src/kit/store.ts";
import type { FenceEntry, StateStore } from "../../src/kit/store.ts";
import type { MachineRecord, State } from "../../src/kit/model.ts";
import { STATE_NAMES } from "../../src/kit/model.ts";

/** How long a test waits for an event before it fails. */
export const WAIT_MS = 5_000;

export interface WatchedStore extends StateStore {
  /** Number of changes handed over (machine puts/deletes, fences, revisions). */
  readonly writes: number;
  /** Latest record handed over for the machine, if any. */
  machine(id: string): MachineRecord | undefined;
  /** Latest persisted mark for (shard, machine). */
  fence(shardId: string, machineId: string): FenceEntry["mark"] | undefined;
  /** Latest revision handed over (0 before any). */
  readonly revision: number;
  /** True once close() was called. */
  readonly closed: boolean;
  /** Resolves with the record as soon as a write shows `id` in `state` (at once if the last one did). */
  until(id: string, state: State): Promise<MachineRecord>;
  hold(): void;
  release(): void;
}

interface Waiter {
  id: string;
  state: State;
  resolve: (m: MachineRecord) => void;
}

export function watchedStore(): WatchedStore {
  const inner = createMemoryStore();
  const machines = new Map<string, MachineRecord>();
  const fences = new Map<string, FenceEntry["mark"]>();
  let waiters: Waiter[] = [];
  let writes = 0;
  let revision = 0;
  let committed = 0;
  let held = false;
  let closed = false;
  let blocked: { upTo: number; resolve: () => void }[] = [];

  function handed(): void {
    writes++;
    if (!held) committed = writes;
  }

  return {
    description: "watched memory",
    load: () => inner.load(),
    handFirst(state) {
      for (const m of state.machines) machines.set(m.id, m);
      for (const e of state.fences) fences.set(JSON.stringify([e.shardId, e.machineId]), e.mark);
      revision = state.rev;
      handed();
    },
    get handedCount() {
      return writes;
    },
    get committedCount() {
      return committed;
    },
    failure: null,
    get writes() {
      return writes;
    },
    get revision() {
      return revision;
    },
    get closed() {
      return closed;
    },
    putMachine(m) {
      inner.putMachine(m);
      machines.set(m.id, m);
      handed();
      const ready = waiters.filter((w) => w.id === m.id && w.state === m.state);
      waiters = waiters.filter((w) => !ready.includes(w));
      for (const w of ready) w.resolve(m);
    },
    deleteMachine(id) {
      inner.deleteMachine(id);
      machines.delete(id);
      handed();
    },
    putFence(e) {
      inner.putFence(e);
      fences.set(JSON.stringify([e.shardId, e.machineId]), e.mark);
      handed();
    },
    putRevision(rev) {
      inner.putRevision(rev);
      revision = rev;
      handed();
    },
    async durable() {
      const upTo = writes;
      if (committed < upTo) await new Promise<void>((resolve) => blocked.push({ upTo, resolve }));
      await inner.durable();
    },
    async close() {
      closed = true;
      await inner.close();
    },
    machine: (id) => machines.get(id),
    fence: (shardId, machineId) => fences.get(JSON.stringify([shardId, machineId])),
    until(id, state) {
      const last = machines.get(id);
      if (last?.state === state) return Promise.resolve(last);
      return withDeadline<MachineRecord>(
        (settle) => {
          const waiter: Waiter = { id, state, resolve: settle };
          waiters.push(waiter);
          return () => waiters = waiters.filter((w) => w !== waiter);
        },
        () =>
          `machine ${id} was not written in ${STATE_NAMES[state]} within ${WAIT_MS} ms ` +
          `(last: ${describe(machines.get(id))})`,
      );
    },
    hold() {
      held = true;
    },
    release() {
      held = false;
      committed = writes;
      const ready = blocked.filter((b) => b.upTo <= committed);
      blocked = blocked.filter((b) => !ready.includes(b));
      for (const b of ready) b.resolve();
    },
  };
}

/**
 * Resolves when `register`'s callback fires, or fails with `message()` after
 * WAIT_MS so a broken kit fails the test instead of hanging it. The listener
 * is registered before the timer is armed: Deno loads its timer module on the
 * first setTimeout and runs pending microtasks meanwhile, so the event can
 * fire inside that call.
 */
export function withDeadline<T>(
  register: (settle: (v: T) => void) => () => void,
  message: () => string,
): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer: { id?: ReturnType<typeof setTimeout>; done: boolean } = { done: false };
    const unregister = register((v) => {
      timer.done = true;
      clearTimeout(timer.id);
      resolve(v);
    });
    const id = setTimeout(() => {
      unregister();
      reject(new Error(message()));
    }, WAIT_MS);
    if (timer.done) clearTimeout(id);
    else timer.id = id;
  });
}

function describe(m: MachineRecord | undefined): string {
  return m ? STATE_NAMES[m.state] : "none";
}

/**
 * True when `p` settled before the event loop's next macrotask: every
 * microtask queued so far (and any it queues) runs first, so an answer that
 * does not wait on anything outside the kit has settled by then.
 */
export async function settlesNow(p: Promise<unknown>): Promise<boolean> {
  let settled = false;
  p.then(() => settled = true, () => settled = true);
  await nextTurn();
  return settled;
}

/** Resolves on the next macrotask, after every pending microtask has run. Not a wait for time. */
export function nextTurn(): Promise<void> {
  return new Promise((r) => setTimeout(r, 0));
}
