// The Deno KV state file's keys and format versions, in one place. Which
// module writes and reads each is in docs/design.md#the-state-store.
//
//   ["meta", "format"]           format version (below); absent until the first write is whole
//   ["meta", "rev"]              the revision as last committed
//   ["meta", "base"]             the packed base in use (BaseRef, src/store/kv_base.ts)
//   ["meta", "redo"]             a staged batch that is durable but maybe not applied (kv_redo.ts)
//   ["b", base id, page, n]      a base's pages, cut into values (kv_base.ts)
//   ["o", generation, id]        a machine changed since the base (kv_overlay.ts)
//   ["of", generation, shard, machine]   a fence mark changed since the base
//   ["mc", id, chunk id, n]      a record too big for one value, in chunks (kv_chunks.ts)
//   ["redo", batch id, n]        a batch too big for one commit, staged (kv_redo.ts)
//   ["m", id], ["f", shard, machine]     per-record keys of format 1 (kv_legacy.ts)

export const FORMAT_KEY: Deno.KvKey = ["meta", "format"];
export const REV_KEY: Deno.KvKey = ["meta", "rev"];
export const BASE_KEY: Deno.KvKey = ["meta", "base"];
export const REDO_KEY: Deno.KvKey = ["meta", "redo"];

/** 1: no base, the per-record keys and the overlay are the state. */
export const FORMAT_NO_BASE = 1;
/** 2: a packed base plus the overlay; every store written by this version is one. */
export const FORMAT_BASE = 2;
/** The newest format this version reads (and the one it writes). */
export const FORMAT_NEWEST = FORMAT_BASE;

export const baseKey = (id: string): Deno.KvKey => ["b", id];
export const BASES: Deno.KvKey = ["b"];

export const OVERLAY_MACHINES = "o";
export const OVERLAY_FENCES = "of";

export const chunkKey = (id: string, chunkId: string): Deno.KvKey => ["mc", id, chunkId];
export const CHUNKS: Deno.KvKey = ["mc"];

export const redoKey = (batchId: string): Deno.KvKey => ["redo", batchId];
export const REDO_PARTS: Deno.KvKey = ["redo"];

export const LEGACY_MACHINES: Deno.KvKey = ["m"];
export const LEGACY_FENCES: Deno.KvKey = ["f"];

/** A machine's value in the overlay or a format-1 file. */
export interface MachineValue {
  /** Inline record bytes (src/store/record_codec.ts). */
  j?: Uint8Array;
  /** Chunk id and chunk count when the record is split. */
  g?: string;
  n?: number;
  /** Deleted: an overlay key hiding the machine in the base. */
  d?: 1;
}

/** A fence mark's value in the overlay or a format-1 file. */
export interface FenceValue {
  e: bigint;
  s: bigint;
}

/** The one line a file of a newer format is refused with: both versions, and what to do. */
export function newerFormat(found: number): string {
  return `state format ${found} was written by a newer provider; this one reads formats ` +
    `${FORMAT_NO_BASE} to ${FORMAT_NEWEST}: upgrade it, or give it a fresh --state`;
}
