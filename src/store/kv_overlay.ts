// The overlay: one key per record changed since the base was packed, so a
// lifecycle commit writes only what it touched. Its rules:
//
// - A machine is ["o", generation, id] holding its record inline, or a chunk
//   id and count (kv_chunks.ts), or the tombstone {d: 1} for a deletion; a
//   fence mark is ["of", generation, shard, machine]; the revision has its
//   own key, ["meta", "rev"], written with the batch it belongs to.
// - Writes go to one generation at a time. Packing moves them to the next
//   (`seal`); the new base's pointer names that generation as the first to
//   apply on top of it, so sealed generations are only read until then.
// - A load applies, in key order (generation, then id), every generation from
//   the base's on; keys of older generations are left over from a cleanup cut
//   short and are skipped.

import { fenceKey } from "../kit/fence.ts";
import type { ChunkTable } from "./kv_chunks.ts";
import { mutation } from "./kv_commit.ts";
import type { Mutation } from "./kv_commit.ts";
import { OVERLAY_FENCES, OVERLAY_MACHINES, REV_KEY } from "./kv_layout.ts";
import type { FenceValue, MachineValue } from "./kv_layout.ts";
import { decodeRecord, encodeRecord } from "./record_codec.ts";
import type { MachineRecord } from "../kit/model.ts";
import type { FenceEntry } from "../kit/store.ts";

/** A record over this many bytes is chunked rather than inline (a KV value holds 64 KiB). */
const INLINE_MAX = 60_000;

/** One change handed to the store, keyed in the write queue by what it changes. */
export type Change =
  /** `chunkId` is picked on the first attempt and kept across retries, so a retry rewrites the same chunks. */
  | { t: "machine"; m: MachineRecord; chunkId?: string }
  | { t: "delete"; id: string }
  | { t: "fence"; e: FenceEntry }
  | { t: "rev"; rev: number };

/** A change's key in the write queue: one per machine, per fence mark, and one for the revision. */
export const machineChangeKey = (id: string) => `m\0${id}`;
export const fenceChangeKey = (f: FenceEntry) => `f\0${fenceKey(f.shardId, f.machineId)}`;
export const REV_CHANGE_KEY = "rev";

/** The whole state, keyed for applying changes in order. */
export interface StateMaps {
  machines: Map<string, MachineRecord>;
  fences: Map<string, FenceEntry>;
}

export function putFenceIn(state: StateMaps, f: FenceEntry): void {
  state.fences.set(fenceKey(f.shardId, f.machineId), f);
}

export interface OverlayWrite {
  muts: Mutation[];
  /** The revision's mutation, if the batch moves it: the caller puts it in the batch's last commit. */
  rev: Mutation[];
  /** What each machine's value points at once committed (chunk id, or null). */
  pointers: [string, string | null][];
}

/** A batch as overlay mutations in `generation`; chunks of large records are written first. */
export async function overlayWrite(
  batch: Iterable<Change>,
  generation: number,
  chunks: ChunkTable,
): Promise<OverlayWrite> {
  const out: OverlayWrite = { muts: [], rev: [], pointers: [] };
  for (const c of batch) {
    if (c.t === "machine") {
      const key = [OVERLAY_MACHINES, generation, c.m.id];
      const bytes = encodeRecord(c.m);
      if (bytes.length <= INLINE_MAX) {
        out.muts.push(mutation(key, { j: bytes } satisfies MachineValue));
        out.pointers.push([c.m.id, null]);
      } else {
        const chunkId = c.chunkId ??= crypto.randomUUID();
        const n = await chunks.write(c.m.id, chunkId, bytes);
        out.muts.push(mutation(key, { g: chunkId, n } satisfies MachineValue));
        out.pointers.push([c.m.id, chunkId]);
      }
    } else if (c.t === "delete") {
      out.muts.push(
        mutation([OVERLAY_MACHINES, generation, c.id], { d: 1 } satisfies MachineValue),
      );
      out.pointers.push([c.id, null]);
    } else if (c.t === "fence") {
      const { shardId, machineId, mark } = c.e;
      out.muts.push(
        mutation(
          [OVERLAY_FENCES, generation, shardId, machineId],
          {
            e: mark.epoch,
            s: mark.seq,
          } satisfies FenceValue,
        ),
      );
    } else {
      out.rev.push(mutation(REV_KEY, c.rev));
    }
  }
  return out;
}

/** A machine's record from its overlay (or format-1) value in `generation`. */
export async function readValue(
  chunks: ChunkTable,
  id: string,
  v: MachineValue,
  generation: number,
): Promise<MachineRecord> {
  if (v.j) {
    chunks.pointed(id, null, generation);
    return decodeRecord(v.j);
  }
  const bytes = await chunks.read(id, v.g!, v.n!);
  chunks.pointed(id, v.g!, generation);
  return decodeRecord(bytes);
}

export function fenceEntry(shardId: unknown, machineId: unknown, v: FenceValue): FenceEntry {
  return {
    shardId: shardId as string,
    machineId: machineId as string,
    mark: { epoch: v.e, seq: v.s },
  };
}

/** Applies every overlay generation from `from` on to `state`; returns how many keys it read. */
export async function readOverlay(
  kv: Deno.Kv,
  from: number,
  state: StateMaps,
  chunks: ChunkTable,
): Promise<number> {
  let keys = 0;
  for await (const e of kv.list<MachineValue>({ prefix: [OVERLAY_MACHINES] })) {
    const [, generation, id] = e.key as [string, number, string];
    if (generation < from) continue;
    keys++;
    if (e.value.d) {
      state.machines.delete(id);
      chunks.pointed(id, null, generation);
    } else {
      state.machines.set(id, await readValue(chunks, id, e.value, generation));
    }
  }
  for await (const e of kv.list<FenceValue>({ prefix: [OVERLAY_FENCES] })) {
    const [, generation, shardId, machineId] = e.key;
    if ((generation as number) < from) continue;
    keys++;
    putFenceIn(state, fenceEntry(shardId, machineId, e.value));
  }
  return keys;
}

/** The newest overlay generation on disk, or `floor` if none is newer. */
export async function newestGeneration(kv: Deno.Kv, floor: number): Promise<number> {
  let newest = floor;
  for (const prefix of [OVERLAY_MACHINES, OVERLAY_FENCES]) {
    for await (const e of kv.list({ prefix: [prefix] }, { reverse: true, limit: 1 })) {
      newest = Math.max(newest, e.key[1] as number);
    }
  }
  return newest;
}

/** Overlay keys of generations below `generation` (already in the base in use). */
export async function staleGenerationKeys(kv: Deno.Kv, generation: number): Promise<Deno.KvKey[]> {
  const keys: Deno.KvKey[] = [];
  for (const prefix of [OVERLAY_MACHINES, OVERLAY_FENCES]) {
    for await (const e of kv.list({ prefix: [prefix] })) {
      if ((e.key[1] as number) >= generation) break;
      keys.push(e.key);
    }
  }
  return keys;
}

/** How many overlay keys the current generation holds, each counted once; moved on by packing. */
export interface OverlayCount {
  /** Generation new writes go to. */
  readonly generation: number;
  /** Keys a restart would read on top of the base. */
  readonly keys: number;
  /** Recovery and load: where writes go, and how many keys were read. */
  reset(generation: number, keys: number): void;
  /** After a commit: the batch's change keys are written in the current generation. */
  wrote(keys: Iterable<string>): void;
  /** Packing starts: writes move to a new generation; returns it and the sealed key count. */
  seal(): { generation: number; sealed: number };
  /** The packing failed: the sealed keys are still read on top of the base. */
  unseal(sealed: number): void;
}

export function createOverlayCount(): OverlayCount {
  let generation = 0;
  let keys = 0;
  let written = new Set<string>();
  return {
    get generation() {
      return generation;
    },
    get keys() {
      return keys;
    },
    reset(g, k) {
      generation = g;
      keys = k;
      written = new Set();
    },
    wrote(changed) {
      for (const k of changed) {
        if (k !== REV_CHANGE_KEY && !written.has(k)) {
          written.add(k);
          keys++;
        }
      }
    },
    seal() {
      const sealed = keys;
      generation++;
      keys = 0;
      written = new Set();
      return { generation, sealed };
    },
    unseal(sealed) {
      keys += sealed;
    },
  };
}
