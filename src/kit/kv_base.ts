// Packed snapshots ("bases") of the whole state for the Deno KV store
// (docs/design.md#the-state-store). Deno KV pays ~9 µs per entry a list
// returns whatever its size, so a fleet kept as one key per record takes
// ~180 ms to read per 20,000 machines; the same records packed ~60 KB to a
// value read in a few ms. A base is a sequence of pages, each page the JSON
// array of its entries (a machine record as `recordJson` writes it, or a fence
// mark as [shard, machine, epoch, seq] with the numbers as decimal strings),
// stored under ["b", <base id>, page, chunk] in values of at most CHUNK_BYTES.

import type { FenceEntry } from "./store.ts";
import type { MachineRecord } from "./model.ts";
import { recordFromJson, recordJson } from "./record_codec.ts";

/** Where a base lives and how many pages it has; the pointer to the current one holds this. */
export interface BaseRef {
  id: string;
  pages: number;
  /** The first overlay generation that applies on top of this base. */
  gen: number;
}

/** JSON characters gathered into one page before it is cut. */
const PAGE_CHARS = 56_000;
/** A KV value holds 64 KiB; a page over this many bytes spans several values. */
export const CHUNK_BYTES = 60_000;

const enc = new TextEncoder();
const dec = new TextDecoder();

export const baseKey = (id: string): Deno.KvKey => ["b", id];

/**
 * The base's pages in order, each as its KV values. A generator, so a caller
 * can commit a few pages at a time and yield the event loop between them.
 */
export function* packBase(
  machines: Iterable<MachineRecord>,
  fences: Iterable<FenceEntry>,
): Generator<Uint8Array[]> {
  let parts: string[] = [];
  let chars = 0;
  const cut = () => {
    const bytes = enc.encode(`[${parts.join(",")}]`);
    parts = [];
    chars = 0;
    const chunks: Uint8Array[] = [];
    for (let off = 0; off < bytes.length; off += CHUNK_BYTES) {
      chunks.push(bytes.subarray(off, off + CHUNK_BYTES));
    }
    return chunks;
  };
  const add = (json: string) => {
    parts.push(json);
    chars += json.length + 1;
  };
  for (const m of machines) {
    const json = recordJson(m);
    if (chars > 0 && chars + json.length > PAGE_CHARS) yield cut();
    add(json);
  }
  for (const f of fences) {
    const json = JSON.stringify([f.shardId, f.machineId, String(f.mark.epoch), String(f.mark.seq)]);
    if (chars > 0 && chars + json.length > PAGE_CHARS) yield cut();
    add(json);
  }
  if (parts.length > 0) yield cut();
}

/** Reads base `ref` page by page, handing each decoded entry over. */
export async function readBase(
  kv: Deno.Kv,
  ref: BaseRef,
  onMachine: (m: MachineRecord) => void,
  onFence: (f: FenceEntry) => void,
): Promise<void> {
  let page = -1;
  let chunks: Uint8Array[] = [];
  let pages = 0;
  const finish = () => {
    if (chunks.length > 0) {
      decodePage(joinChunks(chunks), onMachine, onFence);
      pages++;
    }
    chunks = [];
  };
  for await (const e of kv.list<Uint8Array>({ prefix: baseKey(ref.id) })) {
    const [, , p, c] = e.key as [string, string, number, number];
    if (p !== page) {
      finish();
      page = p;
    }
    if (c !== chunks.length || !(e.value instanceof Uint8Array)) throw corrupt(ref);
    chunks.push(e.value);
  }
  finish();
  if (pages !== ref.pages) throw corrupt(ref);
}

function decodePage(
  bytes: Uint8Array,
  onMachine: (m: MachineRecord) => void,
  onFence: (f: FenceEntry) => void,
): void {
  const entries = JSON.parse(dec.decode(bytes));
  if (!Array.isArray(entries)) throw new Error("state store: corrupt page in the packed state");
  for (const e of entries) {
    if (Array.isArray(e)) {
      onFence({
        shardId: String(e[0]),
        machineId: String(e[1]),
        mark: { epoch: BigInt(e[2]), seq: BigInt(e[3]) },
      });
    } else {
      onMachine(recordFromJson(e));
    }
  }
}

function joinChunks(chunks: Uint8Array[]): Uint8Array {
  if (chunks.length === 1) return chunks[0];
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let off = 0;
  for (const c of chunks) {
    out.set(c, off);
    off += c.length;
  }
  return out;
}

function corrupt(ref: BaseRef): Error {
  return new Error(
    `state store: packed state ${ref.id} is incomplete (expected ${ref.pages} pages)`,
  );
}
