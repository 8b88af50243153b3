// Deno KV state store. The state is a packed base (the whole fleet and its
// fence marks, ~60 KB per KV value, src/kit/kv_base.ts) plus an overlay of
// one key per change written since (a machine, a fence mark; the revision has
// its own key): a lifecycle call writes only what it touched, so its cost does
// not grow with the fleet, and a restart reads a few hundred values instead of
// one per machine. Overlay keys carry a generation: when the overlay holds a
// quarter of the fleet, writes move to the next generation and a new base is
// packed in the background from the state as handed over; one commit then
// points at it and at the first generation still to apply, and what it
// replaced is deleted. Until that commit the old base and every generation
// since are what a restart loads, so a crash anywhere in it loses nothing.
// A graceful close packs a base too. A file without a base (written before
// bases existed, or before the first one) is loaded from its per-record keys.
//
// Changes made in the same tick are coalesced into one batch, and every batch
// is all-or-nothing across a crash at any instant (docs/design.md#the-state-store;
// for operators, docs/configuration.md#how-the-state-file-stays-consistent):
//
// - A batch that fits one KV atomic operation (the common case) is one commit.
// - The first batch a store ever takes (the first inventory, possibly tens of
//   thousands of records) is written in as many commits as it needs, with the
//   format marker in the last one. A store without the marker was never
//   completely written: recovery wipes it and the provider starts over.
// - Any later batch too big for one commit (a reconcile adding many orphans, a
//   restart failing thousands of interrupted machines, a busy tick) is first
//   staged as a redo log under a fresh id, and the commit holding its last part
//   also sets the redo marker: from that instant the batch is durable. It is
//   then applied and the marker removed with the last applied part. Recovery
//   finishes a batch whose marker it finds and drops staged parts without one.
//   It runs once, before load() reads or the first commit writes.
// - A machine record larger than one KV value (big shard_metadata) is split
//   into chunks under a fresh generation, written before the batch that points
//   the machine at them; superseded generations are deleted after it.
//
// KV caps a value at 64 KiB and an atomic operation at 800 KiB / 1000
// mutations; the limits below keep a margin under both.
//
// When a commit fails (disk full, read-only filesystem), the batch goes back in
// the queue and is retried every RETRY_MS; `failure` says why until a retry
// succeeds. The failure is logged once, and the recovery once.

import { getLogger } from "@logtape/logtape";
import { Buffer } from "node:buffer";
import { fenceKey } from "./fence.ts";
import type { FenceEntry, PersistedState, StateStore } from "./store.ts";
import type { MachineRecord } from "./model.ts";
import { baseKey, packBase, readBase, slices } from "./kv_base.ts";
import type { BaseRef } from "./kv_base.ts";
import { decodeRecord, encodeRecord } from "./record_codec.ts";
import { lockState } from "./state_lock.ts";
import type { StateLock } from "./state_lock.ts";

const INLINE_MAX = 60_000;
const ATOMIC_MAX_BYTES = 600_000;
const ATOMIC_MAX_OPS = 500;
/** Mutations packed into one staged redo value (a KV value holds 64 KiB). */
const STAGE_BYTES = 60_000;
const RETRY_MS = 500;

/** Base pages per commit while packing: small commits keep lifecycle commits from queueing long behind them. */
const BASE_COMMIT_BYTES = 130_000;
/** A new base is packed once the overlay holds this many keys, or a quarter of the fleet if more. */
const OVERLAY_MIN = 1_000;
/**
 * After a packing fails (a disk with room for lifecycle commits but not for a
 * base), none starts again for this long: each attempt costs O(fleet).
 */
const PACK_RETRY_MS = 30_000;

const FORMAT_KEY: Deno.KvKey = ["meta", "format"];
/** 1: per-record keys (and the overlay); 2: a packed base is in use. */
const FORMAT = 1;
const FORMAT_BASE = 2;
const REDO_KEY: Deno.KvKey = ["meta", "redo"];
const REV_KEY: Deno.KvKey = ["meta", "rev"];
const BASE_KEY: Deno.KvKey = ["meta", "base"];
/** Per-record keys of files without a base: ["m", id] and ["f", shard, machine]. */
const LEGACY_MACHINES: Deno.KvKey = ["m"];
const LEGACY_FENCES: Deno.KvKey = ["f"];
/** Overlay keys: ["o", gen, id] and ["of", gen, shard, machine]. */
const OVERLAY_MACHINES = "o";
const OVERLAY_FENCES = "of";

type Item =
  /** `gen` is picked on the first attempt and kept across retries, so a retry rewrites the same chunks. */
  | { t: "machine"; id: string; bytes: Uint8Array; gen?: string }
  | { t: "delete"; id: string }
  | { t: "fence"; e: FenceEntry }
  | { t: "rev"; rev: number };

interface MachineValue {
  /** Inline record bytes. */
  j?: Uint8Array;
  /** Chunk generation and count when the record is split. */
  g?: string;
  n?: number;
  /** Deleted (an overlay key hiding the machine in the base). */
  d?: 1;
}

interface RedoMark {
  id: string;
  /** Number of staged parts. */
  n: number;
}

/** One KV write: a set, or a delete when `value` is undefined. `size` bounds its bytes. */
interface Mutation {
  key: Deno.KvKey;
  value?: unknown;
  size: number;
}

/** A staged mutation: [key] deletes, [key, value] sets. */
type Staged = [Deno.KvKey] | [Deno.KvKey, unknown];

interface Waiter {
  gen: number;
  resolve: () => void;
  reject: (e: unknown) => void;
}

const log = getLogger(["bigfleet", "state"]);

export interface KvStoreOptions {
  /** Wraps the opened database (tests inject failing commits). */
  wrapKv?: (kv: Deno.Kv) => Deno.Kv;
}

export async function openKvStore(path: string, opts: KvStoreOptions = {}): Promise<StateStore> {
  const where = `--state ${JSON.stringify(path)}`;
  let lock: StateLock;
  try {
    lock = await lockState(path);
  } catch (e) {
    throw new Error(`${where}: ${message(e)}`);
  }
  let kv: Deno.Kv;
  try {
    kv = await Deno.openKv(path);
    if (opts.wrapKv) kv = opts.wrapKv(kv);
  } catch (e) {
    lock.release();
    throw new Error(`${where}: ${message(e)}`);
  }
  /** Whether the format marker is on disk (set by recovery or the first commit). */
  let initialized = false;
  /**
   * A first inventory spanning several commits is in progress (openFirstWrite):
   * its commits hold back the revision and the format marker, so recovery
   * still finds the store never written, until the first commit after it ends.
   */
  let firstWriteOpen = false;
  let heldRev: Item | null = null;
  let recovering: Promise<boolean> | null = null;
  let pending = new Map<string, Item>();
  /** Chunk generation currently referenced per machine id, and the overlay generation referencing it. */
  const chunkGens = new Map<string, { g: string; gen: number }>();
  /** The base in use (null: the per-record keys are the base). */
  let base: BaseRef | null = null;
  /** Overlay generation new writes go to. */
  let writeGen = 0;
  /** Keys written to `writeGen`, and overlay keys a restart would read on top of the base. */
  let genKeys = new Set<string>();
  let overlayKeys = 0;
  /** The state as handed over (latest values): what the next base packs. */
  let live = new Map<string, MachineRecord>();
  let liveFences = new Map<string, FenceEntry>();
  let liveRev = 0;
  /** A base being packed (or what it replaced being deleted). */
  let packing: Promise<void> | null = null;
  let packAgainAt = 0;
  /**
   * `live` holds the whole state (it was loaded before any change, or the
   * file was empty); a store written without load(), or before it, never
   * packs, or the base would miss the rest.
   */
  let whole = false;
  /** Chunks and staged parts nothing references any more, deleted after the next commit. */
  const deadChunks: [string, string][] = [];
  const deadStages: string[] = [];
  /**
   * A redo attempt failed after its marker may have landed: the next commit
   * must replace or clear that marker, or a restart would replay older values.
   */
  let staleMark = false;
  let enqueued = 0;
  let committed = 0;
  let failure: unknown = null;
  let failingSince = 0;
  let closing = false;
  let flushing: Promise<void> | null = null;
  let waiters: Waiter[] = [];

  function enqueue(key: string, item: Item): void {
    pending.set(key, item);
    enqueued++;
    if (!flushing) flushing = flushLoop();
  }

  async function flushLoop(): Promise<void> {
    // Let the current task finish so its changes land in one commit.
    await Promise.resolve();
    while (pending.size > 0) {
      const batch = pending;
      const gen = enqueued;
      pending = new Map();
      try {
        await commit(batch);
      } catch (e) {
        if (failure === null) {
          failingSince = Date.now();
          log.error(
            "state store commit failed; lifecycle calls answer UNAVAILABLE and the changes are retried every {retryMs} ms until a commit succeeds: {error}",
            { error: message(e), retryMs: RETRY_MS },
          );
        } else {
          log.debug("state store commit failed again: {error}", { error: message(e) });
        }
        failure = e;
        requeue(batch);
        settle(gen, e);
        if (closing) break;
        await new Promise((r) => setTimeout(r, RETRY_MS));
        continue;
      }
      committed = gen;
      if (failure !== null) {
        log.info("state store recovered after {ms} ms: queued changes are committed", {
          ms: Date.now() - failingSince,
        });
        failure = null;
      }
      settle();
      await collectGarbage();
      if (overlayFull() && !closing) startPacking();
    }
    flushing = null;
  }

  /** A failed batch goes back under whatever was queued since (newer changes win). */
  function requeue(batch: Map<string, Item>): void {
    for (const [k, v] of batch) {
      const newer = pending.get(k);
      if (!newer) pending.set(k, v);
      else if (v.t === "machine" && v.gen && !(newer.t === "machine" && newer.gen === v.gen)) {
        deadChunks.push([v.id, v.gen]);
      }
    }
  }

  function settle(failedGen?: number, error?: unknown): void {
    const keep: Waiter[] = [];
    for (const w of waiters) {
      if (w.gen <= committed) w.resolve();
      else if (failedGen !== undefined && w.gen <= failedGen) w.reject(error);
      else keep.push(w);
    }
    waiters = keep;
  }

  async function commit(batch: Map<string, Item>): Promise<void> {
    await recover();
    const muts: Mutation[] = [];
    /** Always in the last commit of the batch. */
    const tail: Mutation[] = [];
    const gens = new Map<string, string | null>();
    const gen = writeGen;
    for (const item of batch.values()) {
      if (item.t === "machine") {
        const key = [OVERLAY_MACHINES, gen, item.id];
        if (item.bytes.length <= INLINE_MAX) {
          muts.push(mutation(key, { j: item.bytes } satisfies MachineValue));
          gens.set(item.id, null);
        } else {
          const g = item.gen ??= crypto.randomUUID();
          const n = await writeChunks(item.id, g, item.bytes);
          muts.push(mutation(key, { g, n } satisfies MachineValue));
          gens.set(item.id, g);
        }
      } else if (item.t === "delete") {
        muts.push(mutation([OVERLAY_MACHINES, gen, item.id], { d: 1 } satisfies MachineValue));
        gens.set(item.id, null);
      } else if (item.t === "fence") {
        const { shardId, machineId, mark } = item.e;
        muts.push(
          mutation([OVERLAY_FENCES, gen, shardId, machineId], { e: mark.epoch, s: mark.seq }),
        );
      } else if (!initialized && firstWriteOpen) {
        heldRev = item;
      } else {
        tail.push(mutation(REV_KEY, item.rev));
      }
    }
    const sealing = !initialized && !firstWriteOpen;
    if (sealing) tail.push(mutation(FORMAT_KEY, FORMAT));
    if (!initialized || fitsOneCommit([...muts, ...tail, mutation(REDO_KEY)])) {
      // A retried batch holds every key of the failed one (newer values win), so
      // dropping the failed attempt's marker in the same commit loses nothing.
      await runBatched(muts, staleMark ? [...tail, mutation(REDO_KEY)] : tail);
    } else {
      await redo(muts, tail);
    }
    staleMark = false;
    if (sealing) initialized = true;
    for (const [id, g] of gens) {
      const old = chunkGens.get(id);
      if (old && old.g !== g) deadChunks.push([id, old.g]);
      if (g) chunkGens.set(id, { g, gen });
      else chunkGens.delete(id);
    }
    for (const k of batch.keys()) {
      if (k !== "rev" && !genKeys.has(k)) {
        genKeys.add(k);
        overlayKeys++;
      }
    }
  }

  /** Whether the overlay has grown enough to pack a new base. */
  function overlayFull(): boolean {
    return overlayKeys >= Math.max(OVERLAY_MIN, live.size >> 2);
  }

  /**
   * Packs the state as handed over into a new base and points the file at it.
   * Writes move to a new generation, which the new base's pointer keeps; the
   * snapshot holds every change handed over so far, so whatever lands in the
   * sealed generations (a commit in flight, a redo rolled forward after a
   * crash) is already in the base. It may hold changes not committed yet,
   * whole ticks of them with their revision (a tick is handed over in one
   * synchronous step): they are committed again under the new generation,
   * and a crash before that loads the state after those ticks, as if their
   * commits had landed and the crash came just before the answers.
   */
  function startPacking(): void {
    if (packing || !whole || !initialized || failure !== null) return;
    if (performance.now() < packAgainAt) return;
    const gen = ++writeGen;
    const carried = overlayKeys;
    genKeys = new Set();
    overlayKeys = 0;
    const machines = [...live.values()];
    const fences = [...liveFences.values()];
    packing = (async () => {
      const old = base;
      const ref: BaseRef = { id: crypto.randomUUID(), pages: 0, gen, rev: liveRev };
      try {
        let batch: Mutation[] = [];
        let bytes = 0;
        for (const page of packBase(machines, fences)) {
          page.forEach((chunk, c) => {
            batch.push(mutation([...baseKey(ref.id), ref.pages, c], chunk));
            bytes += chunk.length;
          });
          ref.pages++;
          if (bytes >= BASE_COMMIT_BYTES) {
            await runBatched(batch);
            batch = [];
            bytes = 0;
          }
        }
        await runBatched(batch, [mutation(BASE_KEY, ref), mutation(FORMAT_KEY, FORMAT_BASE)]);
      } catch (e) {
        overlayKeys += carried;
        packAgainAt = performance.now() + PACK_RETRY_MS;
        log.debug("state store: packing the state failed, the overlay stays: {error}", {
          error: message(e),
        });
        await deleteAll(baseKey(ref.id)).catch(() => {});
        return;
      }
      base = ref;
      for (const [id, c] of chunkGens) {
        if (c.gen < gen) {
          deadChunks.push([id, c.g]);
          chunkGens.delete(id);
        }
      }
      // Not the staged parts: one may belong to a batch the flush loop is writing.
      await collectGarbage(false).catch(() => {});
      // What the new base replaced: nothing loads it any more.
      try {
        if (old) await deleteAll(baseKey(old.id));
        else {
          await deleteAll(LEGACY_MACHINES);
          await deleteAll(LEGACY_FENCES);
        }
        await deleteStaleGenerations(gen);
      } catch (e) {
        log.debug("state store cleanup deferred: {error}", { error: message(e) });
      }
    })().finally(() => packing = null);
  }

  /** Pages of bases not in use: replaced ones a cleanup missed, or a packing cut short. */
  async function deleteOtherBases(): Promise<void> {
    const ranges: Deno.KvListSelector[] = base
      ? [{ prefix: ["b"], end: baseKey(base.id) }, {
        prefix: ["b"],
        start: baseKey(`${base.id}\0`),
      }]
      : [{ prefix: ["b"] }];
    const dead: Deno.KvKey[] = [];
    for (const selector of ranges) for await (const e of kv.list(selector)) dead.push(e.key);
    await runBatched(dead.map((k) => mutation(k)));
  }

  /** Overlay keys of generations below `gen` (already in the base). */
  async function deleteStaleGenerations(gen: number): Promise<void> {
    for (const prefix of [OVERLAY_MACHINES, OVERLAY_FENCES]) {
      const keys: Deno.KvKey[] = [];
      for await (const e of kv.list({ prefix: [prefix] })) {
        if ((e.key[1] as number) >= gen) break;
        keys.push(e.key);
      }
      await runBatched(keys.map((k) => mutation(k)));
    }
  }

  /** Stage the batch, mark it durable, apply it, unmark it. */
  async function redo(muts: Mutation[], tail: Mutation[]): Promise<void> {
    const id = crypto.randomUUID();
    const parts: Mutation[] = [];
    let part: Staged[] = [];
    let bytes = 0;
    const cut = () => {
      parts.push({ key: ["redo", id, parts.length], value: part, size: bytes + 64 });
      part = [];
      bytes = 0;
    };
    for (const m of [...muts, ...tail]) {
      if (part.length > 0 && bytes + m.size > STAGE_BYTES) cut();
      part.push(m.value === undefined ? [m.key] : [m.key, m.value]);
      bytes += m.size;
    }
    if (part.length > 0) cut();
    // Whatever happens from here, these parts are garbage once a later commit succeeds.
    deadStages.push(id);
    staleMark = true;
    await runBatched(parts, [mutation(REDO_KEY, { id, n: parts.length } satisfies RedoMark)]);
    await runBatched(muts, [...tail, mutation(REDO_KEY)]);
  }

  /** Finish a batch whose redo marker survived a crash. */
  async function rollForward(mark: RedoMark): Promise<void> {
    const staged: Staged[] = [];
    let parts = 0;
    for await (const e of kv.list<Staged[]>({ prefix: ["redo", mark.id] })) {
      staged.push(...e.value);
      parts++;
    }
    if (parts !== mark.n) {
      throw new Error(`state store: interrupted batch ${mark.id} has ${parts} of ${mark.n} parts`);
    }
    log.info("state store: finishing a batch of {changes} changes cut short by a crash", {
      changes: staged.length,
    });
    await runBatched(staged.map(([key, value]) => mutation(key, value)), [mutation(REDO_KEY)]);
  }

  /** Splits `ops` over as many commits as needed; `tail` lands together in the last one. */
  async function runBatched(ops: Mutation[], tail: Mutation[] = []): Promise<void> {
    let op = kv.atomic();
    let count = 0;
    let bytes = 0;
    const room = (n: number, b: number) =>
      count + n <= ATOMIC_MAX_OPS && bytes + b <= ATOMIC_MAX_BYTES;
    const next = async () => {
      await mustCommit(op);
      op = kv.atomic();
      count = 0;
      bytes = 0;
    };
    for (const m of ops) {
      if (count > 0 && !room(1, m.size)) await next();
      addTo(op, m);
      count++;
      bytes += m.size;
    }
    const tailBytes = tail.reduce((s, m) => s + m.size, 0);
    if (count > 0 && !room(tail.length, tailBytes)) await next();
    for (const m of tail) addTo(op, m);
    if (count + tail.length > 0) await mustCommit(op);
  }

  async function writeChunks(id: string, g: string, bytes: Uint8Array): Promise<number> {
    const ops = slices(bytes).map((chunk, i) => mutation(["mc", id, g, i], chunk));
    await runBatched(ops);
    return ops.length;
  }

  /** Deletes every key under `prefix`; returns how many there were. */
  async function deleteAll(prefix: Deno.KvKey): Promise<number> {
    const keys: Deno.KvKey[] = [];
    for await (const e of kv.list({ prefix })) keys.push(e.key);
    await runBatched(keys.map((k) => mutation(k)));
    return keys.length;
  }

  /** Best effort: what is left over (a full disk may refuse even deletes) is retried later or at load. */
  async function collectGarbage(stages = true): Promise<void> {
    // Taken off the list before the delete (put back if it fails): a base being
    // packed may add to the lists meanwhile.
    try {
      while (deadChunks.length > 0) {
        const dead = deadChunks.pop()!;
        await deleteAll(["mc", ...dead]).catch((e) => {
          deadChunks.push(dead);
          throw e;
        });
      }
      while (stages && deadStages.length > 0) {
        const dead = deadStages.pop()!;
        await deleteAll(["redo", dead]).catch((e) => {
          deadStages.push(dead);
          throw e;
        });
      }
    } catch (e) {
      log.debug("state store cleanup deferred: {error}", { error: message(e) });
    }
  }

  /**
   * Brings the file to a whole batch before anything reads or writes it:
   * wipes a first inventory cut short, finishes a marked batch, drops
   * unmarked staged parts. Resolves to whether the file holds a fleet. Runs
   * once (again after a failure), from load() or the first commit.
   */
  function recover(): Promise<boolean> {
    recovering ??= (async () => {
      const [format, redoMark, rev, ref] = await kv.getMany<[number, RedoMark, number, BaseRef]>([
        FORMAT_KEY,
        REDO_KEY,
        REV_KEY,
        BASE_KEY,
      ]);
      if ((format.value ?? 0) > FORMAT_BASE) {
        throw new Error(
          `state store format ${format.value} was written by a newer provider; upgrade this one`,
        );
      }
      if (format.value === null && rev.value === null) {
        // Never completely written: what is there is part of a first inventory.
        const keys = await deleteAll([]);
        if (keys > 0) {
          log.warn("state store held {keys} keys of a first inventory cut short; starting over", {
            keys,
          });
        }
        whole = true;
        return false;
      }
      // A revision without the marker: written before the marker existed, and complete.
      if (format.value === null) await mustCommit(kv.atomic().set(FORMAT_KEY, FORMAT));
      initialized = true;
      if (redoMark.value) await rollForward(redoMark.value);
      await deleteAll(["redo"]);
      // Writes go to the newest generation there is: an older one would lose to it at load.
      base = ref.value;
      writeGen = base?.gen ?? 0;
      for (const prefix of [OVERLAY_MACHINES, OVERLAY_FENCES]) {
        for await (const e of kv.list({ prefix: [prefix] }, { reverse: true, limit: 1 })) {
          writeGen = Math.max(writeGen, e.key[1] as number);
        }
      }
      return true;
    })();
    recovering.catch(() => recovering = null);
    return recovering;
  }

  /** A machine's record from its per-record or overlay value (generation `gen`). */
  async function readMachine(id: string, v: MachineValue, gen: number): Promise<MachineRecord> {
    if (v.j) {
      chunkGens.delete(id);
      return decodeRecord(v.j);
    }
    const parts: Uint8Array[] = [];
    for await (const e of kv.list<Uint8Array>({ prefix: ["mc", id, v.g!] })) parts.push(e.value);
    if (parts.length !== v.n) throw new Error(`state store: machine ${id} is missing chunks`);
    chunkGens.set(id, { g: v.g!, gen });
    return decodeRecord(Buffer.concat(parts));
  }

  /**
   * The base (packed, or the per-record keys of a file without one) with the
   * overlay generations since applied in order. Keys of older generations are
   * left from a cleanup cut short; they are skipped and deleted.
   */
  async function readState(): Promise<void> {
    const machines = new Map<string, MachineRecord>();
    const fences = new Map<string, FenceEntry>();
    const putFence = (f: FenceEntry) => fences.set(fenceKey(f.shardId, f.machineId), f);
    overlayKeys = 0;
    if (base) {
      await readBase(kv, base, (m) => machines.set(m.id, m), putFence);
    } else {
      // Read key by key like an overlay, so a big file of them is packed soon.
      for await (const e of kv.list<MachineValue>({ prefix: LEGACY_MACHINES })) {
        const id = e.key[1] as string;
        machines.set(id, await readMachine(id, e.value, -1));
        overlayKeys++;
      }
      for await (const e of kv.list<{ e: bigint; s: bigint }>({ prefix: LEGACY_FENCES })) {
        putFence(fenceEntry(e.key[1], e.key[2], e.value));
        overlayKeys++;
      }
    }
    const from = base?.gen ?? 0;
    for await (const e of kv.list<MachineValue>({ prefix: [OVERLAY_MACHINES] })) {
      const [, gen, id] = e.key as [string, number, string];
      if (gen < from) continue;
      overlayKeys++;
      if (e.value.d) {
        machines.delete(id);
        chunkGens.delete(id);
      } else {
        machines.set(id, await readMachine(id, e.value, gen));
      }
    }
    for await (const e of kv.list<{ e: bigint; s: bigint }>({ prefix: [OVERLAY_FENCES] })) {
      const [, gen, shardId, machineId] = e.key;
      if ((gen as number) < from) continue;
      overlayKeys++;
      putFence(fenceEntry(shardId, machineId, e.value));
    }
    live = machines;
    liveFences = fences;
  }

  /**
   * After load, in the background: deletes what a cleanup or a packing cut
   * short left (other bases' pages, generations older than the base's), then
   * packs a new base if the overlay is full. Holds the packing slot meanwhile,
   * so no packing starts while other bases are being deleted.
   */
  function tidy(): void {
    packing = (async () => {
      try {
        await deleteOtherBases();
        await deleteStaleGenerations(base?.gen ?? 0);
      } catch (e) {
        log.debug("state store cleanup deferred: {error}", { error: message(e) });
      }
    })().finally(() => {
      packing = null;
      if (overlayFull() && !closing) startPacking();
    });
  }

  return {
    description: path,
    get handed() {
      return enqueued;
    },
    get committed() {
      return committed;
    },
    get failure() {
      return failure === null ? null : message(failure);
    },
    async load(): Promise<PersistedState | null> {
      if (!(await recover())) return null;
      const rev = (await kv.get<number>(REV_KEY)).value ?? 0;
      await readState();
      liveRev = Math.max(rev, base?.rev ?? 0);
      // Changes handed over before (or during) the load are not in what was read.
      whole = enqueued === 0;
      // Chunks of a write cut short before its batch, or superseded ones not yet deleted.
      const orphans: Deno.KvKey[] = [];
      for await (const e of kv.list({ prefix: ["mc"] })) {
        if (chunkGens.get(e.key[1] as string)?.g !== e.key[2]) orphans.push(e.key);
      }
      await runBatched(orphans.map((k) => mutation(k)));
      tidy();
      return {
        machines: [...live.values()],
        fences: [...liveFences.values()],
        rev: liveRev,
      };
    },
    putMachine(m) {
      live.set(m.id, m);
      enqueue(`m\0${m.id}`, { t: "machine", id: m.id, bytes: encodeRecord(m) });
    },
    deleteMachine(id) {
      live.delete(id);
      enqueue(`m\0${id}`, { t: "delete", id });
    },
    putFence(e) {
      const key = fenceKey(e.shardId, e.machineId);
      liveFences.set(key, e);
      enqueue(`f\0${key}`, { t: "fence", e });
    },
    putRevision(rev) {
      liveRev = rev;
      enqueue("rev", { t: "rev", rev });
    },
    openFirstWrite() {
      firstWriteOpen = true;
      return () => {
        firstWriteOpen = false;
        // The next commit writes the revision and the marker; make sure there is one.
        if (!initialized && !pending.has("rev") && heldRev) enqueue("rev", heldRev);
        heldRev = null;
      };
    },
    durable(): Promise<void> {
      if (committed >= enqueued) return Promise.resolve();
      if (failure !== null && !flushing) return Promise.reject(failure);
      return new Promise((resolve, reject) => waiters.push({ gen: enqueued, resolve, reject }));
    },
    async close(): Promise<void> {
      // One more attempt for what is queued, then give up: a broken disk must not hang a stop.
      closing = true;
      while (flushing) await flushing;
      // Pack what a restart would otherwise read key by key (not while commits fail).
      while (packing) await packing;
      if (overlayKeys >= OVERLAY_MIN) startPacking();
      while (packing) await packing;
      if (pending.size > 0) {
        log.error("state store closed with {changes} changes not committed: {error}", {
          changes: pending.size,
          error: message(failure),
        });
      }
      kv.close();
      lock.release();
    },
  };
}

function fenceEntry(shardId: unknown, machineId: unknown, v: { e: bigint; s: bigint }): FenceEntry {
  return {
    shardId: shardId as string,
    machineId: machineId as string,
    mark: { epoch: v.e, seq: v.s },
  };
}

function fitsOneCommit(ms: Mutation[]): boolean {
  return ms.length <= ATOMIC_MAX_OPS && ms.reduce((s, m) => s + m.size, 0) <= ATOMIC_MAX_BYTES;
}

/** A mutation with a generous bound on its encoded size (keys count 3 bytes per UTF-16 unit). */
function mutation(key: Deno.KvKey, value?: unknown): Mutation {
  let size = 64;
  for (const part of key) size += typeof part === "string" ? part.length * 3 : 16;
  if (value instanceof Uint8Array) size += value.length;
  else if (value && typeof value === "object" && (value as MachineValue).j instanceof Uint8Array) {
    size += (value as MachineValue).j!.length;
  }
  return { key, value, size };
}

function addTo(op: Deno.AtomicOperation, m: Mutation): void {
  if (m.value === undefined) op.delete(m.key);
  else op.set(m.key, m.value);
}

async function mustCommit(op: Deno.AtomicOperation): Promise<void> {
  const res = await op.commit();
  if (!res.ok) throw new Error("state store atomic commit was rejected");
}

function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
