// The in-memory fleet: machine records indexed for Get and List, the global
// revision, and each machine's last-change revision for the List cursor
// (docs/design.md#list-and-the-cursor). Every change goes to the state store in the same synchronous step.
//
// Besides the latest state, the fleet keeps the committed view: for each
// machine with a change the store has not committed yet, the record (and
// last-change revision) as last committed. Reads answer from it while the
// store cannot commit, so they never show a change a crash could still undo
// (src/kit/answers.ts). It costs an entry per change in flight, dropped as commits land.
//
// The fleet is the one writer of machines and the revision, boot included
// (`openFleet`): a new fleet is the store's first state, written whole; a
// restored one writes what boot changed through the same put/remove as a call.

import type { BootInventory } from "./boot.ts";
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
  /** The revision of a machine's last change (latest view); undefined when unknown. */
  modifiedAt(id: string): number | undefined;
  /** Replace (or add) a record, bump the revision, persist. */
  put(m: MachineRecord): void;
  /** Drop a record for good (a deleted orphan), bump the revision, persist. */
  remove(id: string): void;
  /** Persist the revision itself, no machine changed (a restart moved it). */
  writeRevision(): void;
  /** The fleet as committed: what a restart right now would load. */
  readonly committedView: FleetView;
}

/** One change the store may not have committed yet, and the state it leads to. */
interface Uncommitted {
  /** Committed once the store's committedCount reaches this. */
  upTo: number;
  /** The machine changed; null for the revision alone. */
  id: string | null;
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
 * The fleet boot starts from, handed to the store. A new fleet is the store's
 * first batch, committed in the background while the listener opens: nothing
 * was acknowledged before it lands, every later change commits after it, and
 * a crash before then leaves a never-written file that the next start seeds
 * again with the same slots (their ids come from the offerings). A restored
 * fleet's restart revision, removals and updates (interrupted transitions,
 * capacity changes) are committed before this resolves.
 */
export async function openFleet(
  store: StateStore,
  boot: BootInventory,
  onChange?: (before: MachineRecord | undefined, after: MachineRecord | undefined) => void,
): Promise<Fleet> {
  const fleet = createFleet(store, boot.machines, boot.rev, onChange);
  if (!boot.restored) {
    store.handFirst({ machines: boot.machines, fences: boot.fences, rev: boot.rev });
    return fleet;
  }
  fleet.writeRevision();
  for (const id of boot.removed) fleet.remove(id);
  for (const m of boot.updates) fleet.put(m);
  await store.durable();
  return fleet;
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
  /** Told every change (before, after), the initial records included; must be cheap. */
  onChange?: (before: MachineRecord | undefined, after: MachineRecord | undefined) => void,
): Fleet {
  // Parallel arrays in a stable order, and each id's position: a full List
  // walks arrays instead of doing hash lookups per machine, and a machine
  // costs one map entry. A removed machine leaves a hole (no record) until its
  // removal is committed, so the committed view can still list it; holes are
  // closed then, all in one pass. Capped Lists start where the previous one
  // stopped (the rotor).
  const records: (MachineRecord | undefined)[] = [...initial];
  const ids: string[] = initial.map((m) => m.id);
  /** Revision at which each machine last changed (never 0, so cursor "0" sees everything). */
  const lastMod: number[] = new Array(records.length).fill(rev);
  const index = new Map<string, number>();
  for (let i = 0; i < ids.length; i++) index.set(ids[i], i);
  let present = records.length;
  if (onChange) { for (const m of initial) onChange(undefined, m); }
  let holes = 0;
  let rotor = 0;

  /** Changes in the order they were handed to the store; `head` is the oldest not known committed. */
  const changes: Uncommitted[] = [];
  let head = 0;
  const before = new Map<string, Before>();
  let committedRev = rev;

  function latest(id: string): [MachineRecord | undefined, number | undefined] {
    const i = index.get(id);
    const rec = i === undefined ? undefined : records[i];
    return [rec, rec ? lastMod[i!] : undefined];
  }

  function track(id: string, prev: MachineRecord | undefined, prevMod: number | undefined) {
    const b = before.get(id);
    if (b) b.inFlight++;
    else before.set(id, { rec: prev, mod: prevMod, inFlight: 1 });
    const [rec, mod] = latest(id);
    changes.push({ upTo: store.handedCount, id, rec, mod, rev });
  }

  /** Closes the holes of committed removals (`gone`, by position), shifting the rest down once. */
  function closeHoles(gone: Set<number>): void {
    let to = 0;
    let rotorTo = rotor;
    for (let from = 0; from < records.length; from++) {
      if (gone.has(from)) {
        index.delete(ids[from]);
        if (from < rotor) rotorTo--;
        continue;
      }
      if (to !== from) {
        records[to] = records[from];
        ids[to] = ids[from];
        lastMod[to] = lastMod[from];
        index.set(ids[to], to);
      }
      to++;
    }
    records.length = ids.length = lastMod.length = to;
    holes -= gone.size;
    rotor = rotorTo;
  }

  /** Drops the bookkeeping of what the store has committed since the last look. */
  function catchUp(): void {
    const done = store.committedCount;
    let gone: Set<number> | null = null;
    while (head < changes.length && changes[head].upTo <= done) {
      const c = changes[head++];
      committedRev = c.rev;
      if (c.id === null) continue;
      const b = before.get(c.id)!;
      if (--b.inFlight > 0) {
        b.rec = c.rec;
        b.mod = c.mod;
        continue;
      }
      before.delete(c.id);
      const i = index.get(c.id);
      if (i !== undefined && records[i] === undefined) (gone ??= new Set()).add(i);
    }
    if (gone) closeHoles(gone);
    if (head === changes.length) {
      changes.length = 0;
      head = 0;
    } else if (head >= 4096) {
      changes.splice(0, head);
      head = 0;
    }
  }

  function select(q: Selection, fromCommitted: boolean): MachineRecord[] {
    catchUp();
    const since = parseRevision(q.sinceRevision);
    // Cursors are int64; lastMod values are far below 2^53, so Number keeps the order.
    const sinceN = since === null ? -Infinity : Number(since);
    const wanted = q.states.length > 0 ? new Set(q.states) : null;
    const cap = q.maxResults > 0 ? q.maxResults : Infinity;
    const old = fromCommitted && before.size > 0 ? before : null;
    const n = records.length;
    if (cap === Infinity && sinceN === -Infinity && !wanted && !old && holes === 0) {
      return records.slice() as MachineRecord[];
    }
    const start = cap === Infinity || n === 0 ? 0 : rotor % n;
    const out: MachineRecord[] = [];
    let last = -1;
    for (let i = 0; i < n && out.length < cap; i++) {
      const idx = (start + i) % n;
      const b = old?.get(ids[idx]);
      // Cursor first: unchanged machines are skipped without fetching their record.
      const mod = b ? b.mod : lastMod[idx];
      if (mod !== undefined && mod <= sinceN) continue;
      // Absent: removed (latest view) or not yet committed (committed view).
      const m = b ? b.rec : records[idx];
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

  function get(id: string): MachineRecord | undefined {
    const i = index.get(id);
    return i === undefined ? undefined : records[i];
  }

  const committedView: FleetView = {
    get revision() {
      catchUp();
      return committedRev;
    },
    get(id) {
      catchUp();
      const b = before.get(id);
      return b ? b.rec : get(id);
    },
    select: (q) => select(q, true),
  };

  return {
    get size() {
      return present;
    },
    get revision() {
      return rev;
    },
    get,
    modifiedAt: (id) => latest(id)[1],
    put(m) {
      catchUp();
      const [prev, prevMod] = latest(m.id);
      let i = index.get(m.id);
      if (i === undefined) {
        i = records.length;
        index.set(m.id, i);
        ids.push(m.id);
      } else if (!prev) {
        holes--;
      }
      if (!prev) present++;
      records[i] = m;
      onChange?.(prev, m);
      lastMod[i] = ++rev;
      store.putMachine(m);
      store.putRevision(rev);
      track(m.id, prev, prevMod);
    },
    remove(id) {
      catchUp();
      const [prev, prevMod] = latest(id);
      if (!prev) return;
      records[index.get(id)!] = undefined;
      onChange?.(prev, undefined);
      holes++;
      present--;
      rev++;
      store.deleteMachine(id);
      store.putRevision(rev);
      track(id, prev, prevMod);
    },
    writeRevision() {
      catchUp();
      store.putRevision(rev);
      changes.push({ upTo: store.handedCount, id: null, rec: undefined, mod: undefined, rev });
    },
    select: (q) => select(q, false),
    committedView,
  };
}
