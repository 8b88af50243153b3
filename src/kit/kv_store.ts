// Deno KV state store. One record per key (a machine, a fence mark, the
// revision): a lifecycle call writes only what it touched, so its cost does
// not grow with the fleet. Changes made in the same tick are coalesced into
// one atomic commit.
//
// KV caps a value at 64 KiB and an atomic operation at 800 KiB / 1000
// mutations. A machine record larger than one value (big shard_metadata) is
// split into chunks written first under a fresh generation; the machine key
// then switches to that generation in the main commit, so a crash never
// exposes a torn record. Chunks of superseded generations are deleted after.

import { getLogger } from "@logtape/logtape";
import type { FenceEntry, PersistedState, StateStore } from "./store.ts";
import type { MachineRecord } from "./model.ts";
import { decodeRecord, encodeRecord } from "./record_codec.ts";

const INLINE_MAX = 60_000;
const CHUNK_BYTES = 60_000;
const ATOMIC_MAX_BYTES = 600_000;
const ATOMIC_MAX_OPS = 500;
const RETRY_MS = 500;

type Item =
  | { t: "machine"; id: string; bytes: Uint8Array }
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

interface Waiter {
  gen: number;
  resolve: () => void;
  reject: (e: unknown) => void;
}

const log = getLogger(["bigfleet", "state"]);

export async function openKvStore(path: string): Promise<StateStore> {
  let kv: Deno.Kv;
  try {
    kv = await Deno.openKv(path);
  } catch (e) {
    throw new Error(`--state ${JSON.stringify(path)}: ${e instanceof Error ? e.message : e}`);
  }
  let pending = new Map<string, Item>();
  /** Chunk generation currently referenced per machine id. */
  const chunkGens = new Map<string, string>();
  let enqueued = 0;
  let committed = 0;
  let failure: unknown = null;
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
        committed = gen;
        failure = null;
        settle();
      } catch (e) {
        failure = e;
        log.error("state store commit failed: {error}", { error: String(e) });
        for (const [k, v] of batch) if (!pending.has(k)) pending.set(k, v);
        settle(gen, e);
        await new Promise((r) => setTimeout(r, RETRY_MS));
      }
    }
    flushing = null;
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
    const main: ((op: Deno.AtomicOperation) => void)[] = [];
    const sizes: number[] = [];
    const superseded: [string, string][] = [];
    const newGens = new Map<string, string | null>();
    for (const item of batch.values()) {
      if (item.t === "machine") {
        const old = chunkGens.get(item.id);
        if (old) superseded.push([item.id, old]);
        if (item.bytes.length <= INLINE_MAX) {
          main.push((op) => op.set(["m", item.id], { j: item.bytes } satisfies MachineValue));
          sizes.push(item.bytes.length + 64);
          newGens.set(item.id, null);
        } else {
          const g = crypto.randomUUID();
          const n = await writeChunks(item.id, g, item.bytes);
          main.push((op) => op.set(["m", item.id], { g, n } satisfies MachineValue));
          sizes.push(128);
          newGens.set(item.id, g);
        }
      } else if (item.t === "delete") {
        const old = chunkGens.get(item.id);
        if (old) superseded.push([item.id, old]);
        main.push((op) => op.delete(["m", item.id]));
        sizes.push(64);
        newGens.set(item.id, null);
      } else if (item.t === "fence") {
        const { shardId, machineId, mark } = item.e;
        main.push((op) => op.set(["f", shardId, machineId], { e: mark.epoch, s: mark.seq }));
        sizes.push(shardId.length + machineId.length + 64);
      } else {
        const rev = item.rev;
        main.push((op) => op.set(["meta", "rev"], rev));
        sizes.push(32);
      }
    }
    await runBatched(main, sizes);
    for (const [id, g] of newGens) {
      if (g) chunkGens.set(id, g);
      else chunkGens.delete(id);
    }
    for (const [id, g] of superseded) await deleteChunks(id, g);
  }

  async function runBatched(ops: ((op: Deno.AtomicOperation) => void)[], sizes: number[]) {
    let op = kv.atomic();
    let count = 0;
    let bytes = 0;
    for (let i = 0; i < ops.length; i++) {
      if (count > 0 && (count >= ATOMIC_MAX_OPS || bytes + sizes[i] > ATOMIC_MAX_BYTES)) {
        await mustCommit(op);
        op = kv.atomic();
        count = 0;
        bytes = 0;
      }
      ops[i](op);
      count++;
      bytes += sizes[i];
    }
    if (count > 0) await mustCommit(op);
  }

  async function writeChunks(id: string, g: string, bytes: Uint8Array): Promise<number> {
    const ops: ((op: Deno.AtomicOperation) => void)[] = [];
    const sizes: number[] = [];
    let n = 0;
    for (let off = 0; off < bytes.length; off += CHUNK_BYTES, n++) {
      const part = bytes.subarray(off, off + CHUNK_BYTES);
      const i = n;
      ops.push((op) => op.set(["mc", id, g, i], part));
      sizes.push(part.length + 64);
    }
    await runBatched(ops, sizes);
    return n;
  }

  async function deleteChunks(id: string, g: string): Promise<void> {
    const keys: Deno.KvKey[] = [];
    for await (const e of kv.list({ prefix: ["mc", id, g] })) keys.push(e.key);
    await runBatched(keys.map((k) => (op) => op.delete(k)), keys.map(() => 64));
  }

  async function readMachine(id: string, v: MachineValue): Promise<MachineRecord> {
    if (v.j) return decodeRecord(v.j);
    const parts: Uint8Array[] = [];
    for await (const e of kv.list<Uint8Array>({ prefix: ["mc", id, v.g!] })) parts.push(e.value);
    if (parts.length !== v.n) throw new Error(`state store: machine ${id} is missing chunks`);
    const all = new Uint8Array(parts.reduce((s, p) => s + p.length, 0));
    let off = 0;
    for (const p of parts) {
      all.set(p, off);
      off += p.length;
    }
    chunkGens.set(id, v.g!);
    return decodeRecord(all);
  }

  return {
    description: path,
    async load(): Promise<PersistedState | null> {
      const rev = (await kv.get<number>(["meta", "rev"])).value;
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
      // Chunks left by a crash between the chunk writes and the switch.
      const orphans: Deno.KvKey[] = [];
      for await (const e of kv.list({ prefix: ["mc"] })) {
        if (chunkGens.get(e.key[1] as string) !== e.key[2]) orphans.push(e.key);
      }
      await runBatched(orphans.map((k) => (op) => op.delete(k)), orphans.map(() => 64));
      if (rev === null && machines.length === 0 && fences.length === 0) return null;
      return { machines, fences, rev: rev ?? 0 };
    },
    putMachine: (m) => enqueue(`m\0${m.id}`, { t: "machine", id: m.id, bytes: encodeRecord(m) }),
    deleteMachine: (id) => enqueue(`m\0${id}`, { t: "delete", id }),
    putFence: (e) => enqueue(`f\0${JSON.stringify([e.shardId, e.machineId])}`, { t: "fence", e }),
    putRevision: (rev) => enqueue("rev", { t: "rev", rev }),
    durable(): Promise<void> {
      if (committed >= enqueued) return Promise.resolve();
      if (failure !== null && !flushing) return Promise.reject(failure);
      return new Promise((resolve, reject) => waiters.push({ gen: enqueued, resolve, reject }));
    },
    async close(): Promise<void> {
      while (flushing) await flushing;
      kv.close();
    },
  };
}

async function mustCommit(op: Deno.AtomicOperation): Promise<void> {
  const res = await op.commit();
  if (!res.ok) throw new Error("state store atomic commit was rejected");
}
