// The Deno KV state store: the StateStore seam (src/kit/store.ts) over one
// Deno KV file, assembled from modules that each hold one job and state its
// rules (docs/design.md#the-state-store):
//
//   kv_layout.ts   the file's keys and format versions
//   kv_queue.ts    the write queue: coalescing, ordering, retry, durable()
//   kv_commit.ts   commit splitting within KV's limits
//   kv_redo.ts     the redo log that keeps a batch over one commit all or nothing
//   kv_chunks.ts   records over one KV value
//   kv_base.ts     the packed base: the whole state in a few hundred values
//   kv_overlay.ts  one key per change since the base
//   kv_pack.ts     packing a new base, and garbage collection
//   kv_recover.ts  recovery before the first read or write
//   kv_legacy.ts   files of format 1 (no base)
//
// What this module adds: a never-written file takes its first state as a
// packed base (`handFirst`, or the first batch handed over), all or nothing
// by its pointer commit; every later batch is an overlay write. And the lock:
// one provider per file (src/store/state_lock.ts).

import { getLogger } from "@logtape/logtape";
import { readBase, writeBase } from "./kv_base.ts";
import { createChunkTable } from "./kv_chunks.ts";
import { message, mutation } from "./kv_commit.ts";
import { FORMAT_BASE, FORMAT_KEY, REV_KEY } from "./kv_layout.ts";
import { readPerRecordKeys } from "./kv_legacy.ts";
import {
  createOverlayCount,
  fenceChangeKey,
  machineChangeKey,
  overlayWrite,
  putFenceIn,
  readOverlay,
  REV_CHANGE_KEY,
} from "./kv_overlay.ts";
import type { Change, StateMaps } from "./kv_overlay.ts";
import { createPacking } from "./kv_pack.ts";
import type { HandedState } from "./kv_pack.ts";
import { createWriteQueue } from "./kv_queue.ts";
import { recover } from "./kv_recover.ts";
import { createRedoLog } from "./kv_redo.ts";
import type { MachineRecord } from "../kit/model.ts";
import { lockState } from "./state_lock.ts";
import type { StateLock } from "./state_lock.ts";
import type { FenceEntry, PersistedState, StateStore } from "../kit/store.ts";

const log = getLogger(["bigfleet", "state"]);

export interface KvStoreOptions {
  /** Wraps the opened database (tests inject failing commits). */
  wrapKv?: (kv: Deno.Kv) => Deno.Kv;
  /**
   * A never-written file's first batch (a new fleet) is committed only once
   * this settles, or the store closes: packing it would otherwise hold the
   * event loop while the listener opens, and nothing waits on it before then.
   */
  firstCommitAfter?: Promise<unknown>;
}

export async function openKvStore(path: string, opts: KvStoreOptions = {}): Promise<StateStore> {
  const where = `--state ${JSON.stringify(path)}`;
  const { lock, kv } = await openLocked(path, where, opts);

  const chunks = createChunkTable(kv);
  const redo = createRedoLog(kv);
  const overlay = createOverlayCount();
  const handed: HandedState = { machines: new Map(), fences: new Map(), rev: 0 };
  const closing = Promise.withResolvers<void>();
  const firstHold = opts.firstCommitAfter
    ? Promise.race([opts.firstCommitAfter.catch(() => {}), closing.promise])
    : null;
  /** The file holds a fleet: recovery found one, or a first write landed. */
  let written = false;
  /**
   * `handed` is the whole state: it was loaded before any change, or the file
   * was empty. A store written without load(), or before it, never packs, or
   * the base would miss the rest.
   */
  let whole = false;
  let recovering: Promise<void> | null = null;

  const packing = createPacking({
    kv,
    chunks,
    redo,
    overlay,
    handed,
    ready: () => whole && written && queue.failure === null,
  });
  const queue = createWriteQueue<Queued>({
    commit,
    async afterCommit() {
      await packing.collect();
      packing.startIfFull();
    },
    replaced(old, newer) {
      if (old.t !== "machine" || !old.chunkId) return;
      if (newer.t === "machine" && newer.chunkId === old.chunkId) return;
      chunks.dropped(old.m.id, old.chunkId);
    },
  });

  /** Runs recovery once (again after a failure), before the first read or write. */
  function recovered(): Promise<void> {
    recovering ??= (async () => {
      const r = await recover(kv);
      if (!r.holdsFleet) {
        whole = true;
        return;
      }
      written = true;
      packing.base = r.base;
      overlay.reset(r.generation, 0);
    })();
    // The caller gets the error; the next read or commit tries again.
    recovering.catch(() => recovering = null);
    return recovering;
  }

  /** A never-written file's first state, as a base: nothing of it counts until its pointer commit. */
  async function writeFirstBase(
    machines: readonly MachineRecord[],
    fences: readonly FenceEntry[],
    rev: number,
  ): Promise<void> {
    const at = { id: crypto.randomUUID(), gen: 0, rev };
    const tail = [mutation(REV_KEY, rev), mutation(FORMAT_KEY, FORMAT_BASE)];
    packing.base = await writeBase(kv, at, machines, fences, tail);
    written = true;
    overlay.reset(0, 0);
  }

  async function commit(batch: Map<string, Queued>): Promise<void> {
    await recovered();
    if (!written) {
      if (firstHold) await firstHold;
      const first = firstState(batch);
      await writeFirstBase(first.machines, first.fences, first.rev);
      return;
    }
    const generation = overlay.generation;
    const w = await overlayWrite(changesOf(batch), generation, chunks);
    await redo.commit(w.muts, w.rev);
    for (const [id, chunkId] of w.pointers) chunks.pointed(id, chunkId, generation);
    overlay.wrote(batch.keys());
  }

  async function readState(): Promise<StateMaps> {
    const state: StateMaps = { machines: new Map(), fences: new Map() };
    let keys = 0;
    if (packing.base) {
      await readBase(
        kv,
        packing.base,
        (m) => state.machines.set(m.id, m),
        (f) => putFenceIn(state, f),
      );
    } else {
      keys += await readPerRecordKeys(kv, state, chunks);
    }
    keys += await readOverlay(kv, packing.base?.gen ?? 0, state, chunks);
    overlay.reset(overlay.generation, keys);
    return state;
  }

  return {
    description: path,
    get handedCount() {
      return queue.handedCount;
    },
    get committedCount() {
      return queue.committedCount;
    },
    get failure() {
      return queue.failure === null ? null : message(queue.failure);
    },
    async load(): Promise<PersistedState | null> {
      try {
        await recovered();
        if (!written) return null;
        const rev = (await kv.get<number>(REV_KEY)).value ?? 0;
        const state = await readState();
        handed.machines = state.machines;
        handed.fences = state.fences;
        handed.rev = Math.max(rev, packing.base?.rev ?? 0);
        // Changes handed over before (or during) the load are not in what was read.
        whole = queue.handedCount === 0;
        // Chunks of a write cut short before its batch, or superseded ones not yet deleted.
        await chunks.sweep();
      } catch (e) {
        throw new Error(`${where}: ${message(e)}`);
      }
      packing.tidy();
      return {
        machines: [...handed.machines.values()],
        fences: [...handed.fences.values()],
        rev: handed.rev,
      };
    },
    handFirst(state) {
      if (written || queue.handedCount > 0) {
        throw new Error("state store: a first state is handed only to a never-written file");
      }
      for (const m of state.machines) handed.machines.set(m.id, m);
      for (const f of state.fences) putFenceIn(handed, f);
      handed.rev = state.rev;
      queue.put(FIRST_KEY, { t: "first", state });
    },
    putMachine(m) {
      handed.machines.set(m.id, m);
      queue.put(machineChangeKey(m.id), { t: "machine", m });
    },
    deleteMachine(id) {
      handed.machines.delete(id);
      queue.put(machineChangeKey(id), { t: "delete", id });
    },
    putFence(e) {
      putFenceIn(handed, e);
      queue.put(fenceChangeKey(e), { t: "fence", e });
    },
    putRevision(rev) {
      handed.rev = rev;
      queue.put(REV_CHANGE_KEY, { t: "rev", rev });
    },
    durable: () => queue.durable(),
    async close(): Promise<void> {
      closing.resolve();
      // One more attempt for what is queued, then give up: a broken disk must not hang a stop.
      await queue.drain();
      // Pack what a restart would otherwise read key by key (not while commits fail).
      await packing.idle();
      packing.startForClose();
      await packing.idle();
      if (queue.size > 0) {
        log.error("state store closed with {changes} changes not committed: {error}", {
          changes: queue.size,
          error: message(queue.failure),
        });
      }
      kv.close();
      lock.release();
    },
  };
}

/** The lock first (a second provider is refused before it opens anything), then the file. */
async function openLocked(
  path: string,
  where: string,
  opts: KvStoreOptions,
): Promise<{ lock: StateLock; kv: Deno.Kv }> {
  let lock: StateLock;
  try {
    lock = await lockState(path);
  } catch (e) {
    throw new Error(`${where}: ${message(e)}`);
  }
  try {
    const kv = await Deno.openKv(path);
    return { lock, kv: opts.wrapKv ? opts.wrapKv(kv) : kv };
  } catch (e) {
    lock.release();
    throw new Error(`${where}: ${message(e)}`);
  }
}

/**
 * What the write queue holds: changes, and a new fleet's first state handed
 * over whole (`handFirst`), one entry rather than one per machine.
 */
type Queued = Change | { t: "first"; state: PersistedState };

const FIRST_KEY = "first";

/** A written file's batch: a first state is only ever in a never-written file's first batch. */
function* changesOf(batch: Map<string, Queued>): Generator<Change> {
  for (const c of batch.values()) if (c.t !== "first") yield c;
}

/**
 * A never-written file's first batch as a whole state: a handed first state,
 * with every other change of the batch over it (they were handed over after
 * it, even when a failed attempt requeued it behind them); deletions of
 * machines outside it delete nothing.
 */
function firstState(batch: Map<string, Queued>): PersistedState {
  const first = batch.get(FIRST_KEY);
  const base = first?.t === "first" ? first.state : undefined;
  const machines = new Map((base?.machines ?? []).map((m) => [m.id, m]));
  const fences = new Map((base?.fences ?? []).map((f) => [fenceChangeKey(f), f]));
  let rev = base?.rev ?? 0;
  for (const c of changesOf(batch)) {
    if (c.t === "machine") machines.set(c.m.id, c.m);
    else if (c.t === "delete") machines.delete(c.id);
    else if (c.t === "fence") fences.set(fenceChangeKey(c.e), c.e);
    else rev = c.rev;
  }
  return { machines: [...machines.values()], fences: [...fences.values()], rev };
}
