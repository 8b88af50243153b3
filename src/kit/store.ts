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
  putMachine(m: MachineRecord): void;
  deleteMachine(id: string): void;
  putFence(e: FenceEntry): void;
  putRevision(rev: number): void;
  /** Resolves when every change handed over before the call is committed; rejects if that commit failed. */
  durable(): Promise<void>;
  /**
   * Progress, for answering reads from what is committed while commits fail:
   * `handed` counts the changes handed over so far, `committed` how many of
   * them are committed. Stores that leave them out are taken as committing
   * everything they are handed.
   */
  readonly handed?: number;
  readonly committed?: number;
  /** Why commits fail (the last one failed and no retry has succeeded since); null or absent when healthy. */
  readonly failure?: string | null;
  /**
   * Lets the first inventory of a never-written store span several commits
   * (each durable before the next is handed over, so a large new fleet is
   * never queued whole): until the returned function is called and a commit
   * follows, a restart finds the store never written and seeds again. Stores
   * that cannot be torn by a crash leave it out.
   */
  openFirstWrite?(): () => void;
  /** Commits what is queued (one attempt if commits are failing), then releases the state. */
  close(): Promise<void>;
}

/** No persistence: state lives and dies with the process. */
export function createMemoryStore(): StateStore {
  return {
    description: "memory",
    load: () => Promise.resolve(null),
    putMachine() {},
    deleteMachine() {},
    putFence() {},
    putRevision() {},
    durable: () => Promise.resolve(),
    close: () => Promise.resolve(),
  };
}
