// Chunked records: a machine record over one KV value (a large
// shard_metadata) is written as ["mc", id, chunk id, n] values under a fresh
// chunk id, before the commit that points the machine's key at that id and
// count. Its rules:
//
// - A chunk id is picked once per change and kept across retries of it, so a
//   retry rewrites the same chunks.
// - The table knows which chunk id each machine's loaded or committed value
//   points at, and in which overlay generation. Chunks nothing points at any
//   more (superseded, of a change replaced before it committed, or absorbed
//   into a packed base) are deleted after the next commit, best effort;
//   `sweep()` at load deletes whatever such a cleanup missed.

import { Buffer } from "node:buffer";
import { commitAll, deleteAll, mutation, slices } from "./kv_commit.ts";
import { chunkKey, CHUNKS } from "./kv_layout.ts";

export interface ChunkTable {
  /** Writes `bytes` as chunks of a new id; returns it and the chunk count. */
  write(id: string, chunkId: string, bytes: Uint8Array): Promise<number>;
  /** The chunks `chunkId` of machine `id`, joined; throws unless there are exactly `n`. */
  read(id: string, chunkId: string, n: number): Promise<Uint8Array>;
  /** Machine `id`'s value, in overlay `generation`, now points at `chunkId` (null: inline or deleted). */
  pointed(id: string, chunkId: string | null, generation: number): void;
  /** Chunks that will never be pointed at (a change replaced before it committed). */
  dropped(id: string, chunkId: string): void;
  /** A base packed at `generation` holds every record of older ones: their chunks are garbage. */
  packedBelow(generation: number): void;
  /** Deletes the garbage chunks; throws (keeping them listed) when the disk refuses. */
  collect(): Promise<void>;
  /** Deletes every chunk no loaded value points at (load only). */
  sweep(): Promise<void>;
}

export function createChunkTable(kv: Deno.Kv): ChunkTable {
  const current = new Map<string, { chunkId: string; generation: number }>();
  const dead: [string, string][] = [];

  return {
    async write(id, chunkId, bytes) {
      const ops = slices(bytes).map((chunk, i) => mutation([...chunkKey(id, chunkId), i], chunk));
      await commitAll(kv, ops);
      return ops.length;
    },
    async read(id, chunkId, n) {
      const parts: Uint8Array[] = [];
      for await (const e of kv.list<Uint8Array>({ prefix: chunkKey(id, chunkId) })) {
        parts.push(e.value);
      }
      if (parts.length !== n) throw new Error(`state store: machine ${id} is missing chunks`);
      return Buffer.concat(parts);
    },
    pointed(id, chunkId, generation) {
      const old = current.get(id);
      if (old && old.chunkId !== chunkId) dead.push([id, old.chunkId]);
      if (chunkId) current.set(id, { chunkId, generation });
      else current.delete(id);
    },
    dropped(id, chunkId) {
      if (current.get(id)?.chunkId !== chunkId) dead.push([id, chunkId]);
    },
    packedBelow(generation) {
      for (const [id, c] of current) {
        if (c.generation < generation) {
          dead.push([id, c.chunkId]);
          current.delete(id);
        }
      }
    },
    async collect() {
      // Taken off the list before the delete (put back if it fails): a packing
      // may add to it meanwhile.
      while (dead.length > 0) {
        const d = dead.pop()!;
        await deleteAll(kv, chunkKey(...d)).catch((e) => {
          dead.push(d);
          throw e;
        });
      }
    },
    async sweep() {
      const orphans: Deno.KvKey[] = [];
      for await (const e of kv.list({ prefix: CHUNKS })) {
        if (current.get(e.key[1] as string)?.chunkId !== e.key[2]) orphans.push(e.key);
      }
      await commitAll(kv, orphans.map((k) => mutation(k)));
    },
  };
}
