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
  // Parallel arrays in a stable order, and each id's position: a full List
  // walks two arrays instead of doing two hash lookups per machine, and a
  // machine costs one map entry. Capped Lists start where the previous one
  // stopped (the rotor).
  const records: MachineRecord[] = [...initial];
  /** Revision at which each machine last changed (never 0, so cursor "0" sees everything). */
  const lastMod: number[] = new Array(records.length).fill(rev);
  const index = new Map<string, number>();
  for (let i = 0; i < records.length; i++) index.set(records[i].id, i);
  let rotor = 0;

  return {
    get size() {
      return records.length;
    },
    get revision() {
      return rev;
    },
    get(id) {
      const i = index.get(id);
      return i === undefined ? undefined : records[i];
    },
    put(m) {
      let i = index.get(m.id);
      if (i === undefined) {
        i = records.length;
        index.set(m.id, i);
      }
      records[i] = m;
      lastMod[i] = ++rev;
      store.putMachine(m);
      store.putRevision(rev);
    },
    remove(id) {
      const i = index.get(id);
      if (i === undefined) return;
      records.splice(i, 1);
      lastMod.splice(i, 1);
      index.delete(id);
      for (let j = i; j < records.length; j++) index.set(records[j].id, j);
      rev++;
      store.deleteMachine(id);
      store.putRevision(rev);
    },
    select(q) {
      const since = parseRevision(q.sinceRevision);
      // Cursors are int64; lastMod values are far below 2^53, so Number keeps the order.
      const sinceN = since === null ? -Infinity : Number(since);
      const wanted = q.states.length > 0 ? new Set(q.states) : null;
      const cap = q.maxResults > 0 ? q.maxResults : Infinity;
      const n = records.length;
      if (cap === Infinity && sinceN === -Infinity && wanted === null) return records.slice();
      const start = cap === Infinity || n === 0 ? 0 : rotor % n;
      const out: MachineRecord[] = [];
      let last = -1;
      for (let i = 0; i < n && out.length < cap; i++) {
        const idx = (start + i) % n;
        if (lastMod[idx] <= sinceN) continue;
        const m = records[idx];
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
