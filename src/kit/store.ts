// Durable state seam. The kit mutates memory synchronously and hands the
// touched records to the store; `durable()` resolves once everything handed
// over so far is committed. Every response waits on it, so nothing a client
// has seen can be lost by a crash right after (docs/design.md#answers-and-durability
// says what happens while commits fail; #the-state-store, what a store must do).

import type { Mark } from "./fence.ts";
import type { MachineRecord } from "./model.ts";

export interface FenceEntry {
  shardId: string;
  machineId: string;
  mark: Mark;
}

export interface PersistedState {
  machines: MachineRecord[];
  fences: FenceEntry[];
  rev: number;
}

export interface StateStore {
  /** "memory" or the KV path, for logs. */
  readonly description: string;
  /** Everything stored, or null when the store has never been written. */
  load(): Promise<PersistedState | null>;
  /**
   * Hands over the first state of a store load() found never written, as one
   * change: the next commit writes it whole, all or nothing across a crash at
   * any instant (a restart then finds it whole, or never written and seeds
   * again), before anything handed over after it; durable() says when it has
   * landed.
   */
  handFirst(state: PersistedState): void;
  putMachine(m: MachineRecord): void;
  deleteMachine(id: string): void;
  putFence(e: FenceEntry): void;
  putRevision(rev: number): void;
  /** Resolves when every change handed over before the call is committed; rejects if that commit failed. */
  durable(): Promise<void>;
  /**
   * Progress, for answering reads from what is committed while commits fail:
   * how many changes were handed over so far, and how many of them are
   * committed (they commit in order).
   */
  readonly handedCount: number;
  readonly committedCount: number;
  /** Why commits fail (the last one failed and no retry has succeeded since); null when healthy. */
  readonly failure: string | null;
  /** Commits what is queued (one attempt if commits are failing), then releases the state. */
  close(): Promise<void>;
}

/** No persistence: state lives and dies with the process; every change is committed as it is handed over. */
export function createMemoryStore(): StateStore {
  let handed = 0;
  const count = () => void handed++;
  return {
    description: "memory",
    load: () => Promise.resolve(null),
    handFirst: count,
    putMachine: count,
    deleteMachine: count,
    putFence: count,
    putRevision: count,
    durable: () => Promise.resolve(),
    get handedCount() {
      return handed;
    },
    get committedCount() {
      return handed;
    },
    failure: null,
    close: () => Promise.resolve(),
  };
}
