// Deno KV state store. One record per key (a machine, a fence mark, the
// revision): a lifecycle call writes only what it touched, so its cost does
// not grow with the fleet. Changes made in the same tick are coalesced into
// one batch, and every batch is all-or-nothing across a crash at any instant
// (docs/design.md#the-state-store; for operators,
// docs/configuration.md#how-the-state-file-stays-consistent):
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
import { decodeRecord, encodeRecord } from "./record_codec.ts";
import { lockState } from "./state_lock.ts";
import type { StateLock } from "./state_lock.ts";

const INLINE_MAX = 60_000;
const CHUNK_BYTES = 60_000;
const ATOMIC_MAX_BYTES = 600_000;
const ATOMIC_MAX_OPS = 500;
/** Mutations packed into one staged redo value (a KV value holds 64 KiB). */
const STAGE_BYTES = 60_000;
const RETRY_MS = 500;

const FORMAT_KEY: Deno.KvKey = ["meta", "format"];
const FORMAT = 1;
const REDO_KEY: Deno.KvKey = ["meta", "redo"];
const REV_KEY: Deno.KvKey = ["meta", "rev"];

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
  /** Chunk generation currently referenced per machine id. */
  const chunkGens = new Map<string, string>();
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
    for (const item of batch.values()) {
      if (item.t === "machine") {
        if (item.bytes.length <= INLINE_MAX) {
          muts.push(mutation(["m", item.id], { j: item.bytes } satisfies MachineValue));
          gens.set(item.id, null);
        } else {
          const g = item.gen ??= crypto.randomUUID();
          const n = await writeChunks(item.id, g, item.bytes);
          muts.push(mutation(["m", item.id], { g, n } satisfies MachineValue));
          gens.set(item.id, g);
        }
      } else if (item.t === "delete") {
        muts.push(mutation(["m", item.id]));
        gens.set(item.id, null);
      } else if (item.t === "fence") {
        const { shardId, machineId, mark } = item.e;
        muts.push(mutation(["f", shardId, machineId], { e: mark.epoch, s: mark.seq }));
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
      if (old && old !== g) deadChunks.push([id, old]);
      if (g) chunkGens.set(id, g);
      else chunkGens.delete(id);
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
    const ops: Mutation[] = [];
    for (let off = 0; off < bytes.length; off += CHUNK_BYTES) {
      ops.push(mutation(["mc", id, g, ops.length], bytes.subarray(off, off + CHUNK_BYTES)));
    }
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
  async function collectGarbage(): Promise<void> {
    try {
      while (deadChunks.length > 0) {
        const [id, g] = deadChunks[deadChunks.length - 1];
        await deleteAll(["mc", id, g]);
        deadChunks.pop();
      }
      while (deadStages.length > 0) {
        await deleteAll(["redo", deadStages[deadStages.length - 1]]);
        deadStages.pop();
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
      const [format, redoMark, rev] = await kv.getMany<[number, RedoMark, number]>([
        FORMAT_KEY,
        REDO_KEY,
        REV_KEY,
      ]);
      if (format.value === null && rev.value === null) {
        // Never completely written: what is there is part of a first inventory.
        const keys = await deleteAll([]);
        if (keys > 0) {
          log.warn("state store held {keys} keys of a first inventory cut short; starting over", {
            keys,
          });
        }
        return false;
      }
      // A revision without the marker: written before the marker existed, and complete.
      if (format.value === null) await mustCommit(kv.atomic().set(FORMAT_KEY, FORMAT));
      initialized = true;
      if (redoMark.value) await rollForward(redoMark.value);
      await deleteAll(["redo"]);
      return true;
    })();
    recovering.catch(() => recovering = null);
    return recovering;
  }

  async function readMachine(id: string, v: MachineValue): Promise<MachineRecord> {
    if (v.j) return decodeRecord(v.j);
    const parts: Uint8Array[] = [];
    for await (const e of kv.list<Uint8Array>({ prefix: ["mc", id, v.g!] })) parts.push(e.value);
    if (parts.length !== v.n) throw new Error(`state store: machine ${id} is missing chunks`);
    chunkGens.set(id, v.g!);
    return decodeRecord(Buffer.concat(parts));
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
      const rev = (await kv.get<number>(REV_KEY)).value;
      const machines: MachineRecord[] = [];
      for await (const e of kv.list<MachineValue>({ prefix: ["m"] })) {
        machines.push(await readMachine(e.key[1] as string, e.value));
      }
      const fences: FenceEntry[] = [];
      for await (const e of kv.list<{ e: bigint; s: bigint }>({ prefix: ["f"] })) {
        fences.push({
          shardId: e.key[1] as string,
          machineId: e.key[2] as string,
          mark: { epoch: e.value.e, seq: e.value.s },
        });
      }
      // Chunks of a write cut short before its batch, or superseded ones not yet deleted.
      const orphans: Deno.KvKey[] = [];
      for await (const e of kv.list({ prefix: ["mc"] })) {
        if (chunkGens.get(e.key[1] as string) !== e.key[2]) orphans.push(e.key);
      }
      await runBatched(orphans.map((k) => mutation(k)));
      return { machines, fences, rev: rev ?? 0 };
    },
    putMachine: (m) => enqueue(`m\0${m.id}`, { t: "machine", id: m.id, bytes: encodeRecord(m) }),
    deleteMachine: (id) => enqueue(`m\0${id}`, { t: "delete", id }),
    putFence: (e) => enqueue(`f\0${fenceKey(e.shardId, e.machineId)}`, { t: "fence", e }),
    putRevision: (rev) => enqueue("rev", { t: "rev", rev }),
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
