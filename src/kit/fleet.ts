// The in-memory fleet: machine records indexed for Get and List, the global
// revision, and each machine's last-change revision for the List cursor.
// Every change goes to the state store in the same synchronous step.

import type { MachineRecord } from "./model.ts";
import { parseRevision } from "./revision.ts";
import type { StateStore } from "./store.ts";

export interface Selection {
  states: readonly number[];
  /** Zero or less: no cap. */
  maxResults: number;
  sinceRevision?: Uint8Array;
}

export interface Fleet {
  readonly size: number;
  readonly revision: number;
  get(id: string): MachineRecord | undefined;
  /** Replace (or add) a record, bump the revision, persist. */
  put(m: MachineRecord): void;
  /** Drop a record for good (a deleted orphan), bump the revision, persist. */
  remove(id: string): void;
  /** The List filter: cursor, then states, then the cap. */
  select(q: Selection): MachineRecord[];
}

/**
 * A fleet over `initial` at revision `rev`. Loaded machines all take `rev`
 * as their last change, so any cursor issued before a restart (which is
 * older than the bumped revision) returns them all.
 */
export function createFleet(
  store: StateStore,
  initial: readonly MachineRecord[],
  rev: number,
): Fleet {
  const machines = new Map<string, MachineRecord>();
  /** Revision at which each machine last changed (never 0, so cursor "0" sees everything). */
  const lastMod = new Map<string, number>();
  /** Machine ids in a stable order; capped Lists start where the previous one stopped. */
  const order: string[] = [];
  let rotor = 0;
  for (const m of initial) {
    machines.set(m.id, m);
    lastMod.set(m.id, rev);
    order.push(m.id);
  }

  return {
    get size() {
      return machines.size;
    },
    get revision() {
      return rev;
    },
    get: (id) => machines.get(id),
    put(m) {
      if (!machines.has(m.id)) order.push(m.id);
      machines.set(m.id, m);
      lastMod.set(m.id, ++rev);
      store.putMachine(m);
      store.putRevision(rev);
    },
    remove(id) {
      if (!machines.delete(id)) return;
      lastMod.delete(id);
      order.splice(order.indexOf(id), 1);
      rev++;
      store.deleteMachine(id);
      store.putRevision(rev);
    },
    select(q) {
      const since = parseRevision(q.sinceRevision);
      // Cursors are int64; lastMod values are far below 2^53, so Number keeps the order.
      const sinceN = since === null ? null : Number(since);
      const wanted = q.states.length > 0 ? new Set(q.states) : null;
      const cap = q.maxResults > 0 ? q.maxResults : Infinity;
      const n = order.length;
      const start = cap === Infinity || n === 0 ? 0 : rotor % n;
      const out: MachineRecord[] = [];
      let last = -1;
      for (let i = 0; i < n && out.length < cap; i++) {
        const idx = (start + i) % n;
        const id = order[idx];
        if (sinceN !== null && lastMod.get(id)! <= sinceN) continue;
        const m = machines.get(id)!;
        if (wanted && !wanted.has(m.state)) continue;
        out.push(m);
        last = idx;
      }
      // Capped Lists resume after the last machine returned, so back-to-back
      // `max_results=1` picks return different machines.
      if (cap !== Infinity && last >= 0) rotor = last + 1;
      return out;
    },
  };
}
