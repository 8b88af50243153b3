// The in-memory fleet: machine records indexed for Get and List, the global
// revision, and each machine's last-change revision for the List cursor.
// Every change goes to the state store in the same synchronous step.
//
// Besides the latest state, the fleet keeps the committed one: for each
// machine with a change the store has not committed yet, the record (and
// last-change revision) as last committed. Reads answer from it while the
// store cannot commit, so they never show a change a crash could still undo
// (src/kit/kit.ts). It costs an entry per change in flight, dropped as commits land.

import type { MachineRecord } from "./model.ts";
import { parseRevision } from "./revision.ts";
import type { StateStore } from "./store.ts";

export interface Selection {
  states: readonly number[];
  /** Zero or less: no cap. */
  maxResults: number;
  sinceRevision?: Uint8Array;
}

/** What a read can see. */
export interface FleetView {
  readonly revision: number;
  get(id: string): MachineRecord | undefined;
  /** The List filter: cursor, then states, then the cap. */
  select(q: Selection): MachineRecord[];
}

/** The latest state (a view itself) and the committed view. */
export interface Fleet extends FleetView {
  readonly size: number;
  /** Replace (or add) a record, bump the revision, persist. */
  put(m: MachineRecord): void;
  /** Drop a record for good (a deleted orphan), bump the revision, persist. */
  remove(id: string): void;
  /** The fleet as committed: what a restart right now would load. */
  readonly committed: FleetView;
}

/** One change the store may not have committed yet, and the state it leads to. */
interface Change {
  /** Committed once the store's `committed` count reaches this. */
  upTo: number;
  id: string;
  rec: MachineRecord | undefined;
  mod: number | undefined;
  rev: number;
}

/** A machine's committed record while changes to it are in flight. */
interface Before {
  rec: MachineRecord | undefined;
  mod: number | undefined;
  inFlight: number;
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

  /** Changes in the order they were handed to the store; `head` is the oldest not known committed. */
  const changes: Change[] = [];
  let head = 0;
  const before = new Map<string, Before>();
  let committedRev = rev;

  // Invariant: an id is in `order` iff it is in `machines` or has changes in
  // flight, so a removal stays listable (committed view) until it is committed.
  function track(id: string, prev: MachineRecord | undefined, prevMod: number | undefined) {
    const b = before.get(id);
    if (b) b.inFlight++;
    else before.set(id, { rec: prev, mod: prevMod, inFlight: 1 });
    changes.push({ upTo: store.handed ?? 0, id, rec: machines.get(id), mod: lastMod.get(id), rev });
  }

  /** Drops what the store has committed since the last look. */
  function settle(): void {
    // A store that does not count commits is taken as committing everything at once.
    const done = store.committed ?? Infinity;
    while (head < changes.length && changes[head].upTo <= done) {
      const c = changes[head++];
      committedRev = c.rev;
      const b = before.get(c.id)!;
      if (--b.inFlight > 0) {
        b.rec = c.rec;
        b.mod = c.mod;
        continue;
      }
      before.delete(c.id);
      if (!machines.has(c.id)) order.splice(order.indexOf(c.id), 1);
    }
    if (head === changes.length) {
      changes.length = 0;
      head = 0;
    } else if (head >= 4096) {
      changes.splice(0, head);
      head = 0;
    }
  }

  function select(q: Selection, committed: boolean): MachineRecord[] {
    settle();
    const since = parseRevision(q.sinceRevision);
    // Cursors are int64; lastMod values are far below 2^53, so Number keeps the order.
    const sinceN = since === null ? null : Number(since);
    const wanted = q.states.length > 0 ? new Set(q.states) : null;
    const cap = q.maxResults > 0 ? q.maxResults : Infinity;
    const old = committed && before.size > 0 ? before : null;
    const n = order.length;
    const start = cap === Infinity || n === 0 ? 0 : rotor % n;
    const out: MachineRecord[] = [];
    let last = -1;
    for (let i = 0; i < n && out.length < cap; i++) {
      const idx = (start + i) % n;
      const id = order[idx];
      const b = old?.get(id);
      // Cursor first: unchanged machines are skipped without fetching their record.
      if (sinceN !== null && (b ? b.mod : lastMod.get(id))! <= sinceN) continue;
      // Absent: removed (latest view) or not yet committed (committed view).
      const m = b ? b.rec : machines.get(id);
      if (!m) continue;
      if (wanted && !wanted.has(m.state)) continue;
      out.push(m);
      last = idx;
    }
    // Capped Lists resume after the last machine returned, so back-to-back
    // `max_results=1` picks return different machines.
    if (cap !== Infinity && last >= 0) rotor = last + 1;
    return out;
  }

  const committedView: FleetView = {
    get revision() {
      settle();
      return committedRev;
    },
    get(id) {
      settle();
      const b = before.get(id);
      return b ? b.rec : machines.get(id);
    },
    select: (q) => select(q, true),
  };

  return {
    get size() {
      return machines.size;
    },
    get revision() {
      return rev;
    },
    get: (id) => machines.get(id),
    put(m) {
      settle();
      const prev = machines.get(m.id);
      const prevMod = lastMod.get(m.id);
      if (!prev && !before.has(m.id)) order.push(m.id);
      machines.set(m.id, m);
      lastMod.set(m.id, ++rev);
      store.putMachine(m);
      store.putRevision(rev);
      track(m.id, prev, prevMod);
    },
    remove(id) {
      settle();
      const prev = machines.get(id);
      if (!prev) return;
      const prevMod = lastMod.get(id);
      machines.delete(id);
      lastMod.delete(id);
      rev++;
      store.deleteMachine(id);
      store.putRevision(rev);
      track(id, prev, prevMod);
    },
    select: (q) => select(q, false),
    committed: committedView,
  };
}
