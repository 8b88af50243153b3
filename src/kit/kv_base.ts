// Packed snapshots ("bases") of the whole state for the Deno KV store
// (docs/design.md#the-state-store). Deno KV pays ~9 µs per entry a list
// returns whatever its size, so a fleet kept as one key per record takes
// ~180 ms to read per 20,000 machines; the same records packed ~60 KB to a
// value read in a few ms. A base is a sequence of pages stored under
// ["b", <base id>, page, chunk] in values of at most CHUNK_BYTES. A page is
// the JSON object {"d": dictionary, "m": machines, "f": fences}: machine
// records in the packed form of src/kit/record_codec.ts (positional, repeated
// values as dictionary indexes), fence marks as [shard, machine, epoch, seq]
// with the numbers as decimal strings.

import { Buffer } from "node:buffer";
import type { FenceEntry } from "./store.ts";
import type { MachineRecord } from "./model.ts";
import { packer, unpacker } from "./record_codec.ts";

/** Where a base lives and how many pages it has; the pointer to the current one holds this. */
export interface BaseRef {
  id: string;
  pages: number;
  /** The first overlay generation that applies on top of this base. */
  gen: number;
  /**
   * The revision the packed state was at. It can be ahead of ["meta", "rev"]
   * (the base may hold changes whose own commit a crash cut off), and the
   * revision only grows, so a load takes the larger.
   */
  rev: number;
}

/** Records, then fence marks, per page: ~35 KB of JSON for typical records. */
const PAGE_ENTRIES = 300;
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
  machines: readonly MachineRecord[],
  fences: readonly FenceEntry[],
): Generator<Uint8Array[]> {
  for (let i = 0; i < machines.length; i += PAGE_ENTRIES) {
    const p = packer();
    const m = machines.slice(i, i + PAGE_ENTRIES).map(p.pack);
    yield chunked({ d: p.dictionary, m, f: [] });
  }
  for (let i = 0; i < fences.length; i += PAGE_ENTRIES) {
    const f = fences.slice(i, i + PAGE_ENTRIES).map((e) => [
      e.shardId,
      e.machineId,
      String(e.mark.epoch),
      String(e.mark.seq),
    ]);
    yield chunked({ d: [], m: [], f });
  }
}

function chunked(page: unknown): Uint8Array[] {
  return slices(enc.encode(JSON.stringify(page)));
}

/** `bytes` cut into KV values of at most CHUNK_BYTES (views, not copies). */
export function slices(bytes: Uint8Array): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (let off = 0; off < bytes.length; off += CHUNK_BYTES) {
    out.push(bytes.subarray(off, off + CHUNK_BYTES));
  }
  return out;
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
      decodePage(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks), onMachine, onFence);
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
  const page = JSON.parse(dec.decode(bytes));
  if (!Array.isArray(page?.m) || !Array.isArray(page.f)) {
    throw new Error("state store: corrupt page in the packed state");
  }
  const unpack = unpacker(page.d);
  for (const t of page.m) onMachine(unpack(t));
  for (const e of page.f) {
    if (!Array.isArray(e) || e.length !== 4) throw new Error("state store: corrupt fence mark");
    onFence({
      shardId: String(e[0]),
      machineId: String(e[1]),
      mark: { epoch: BigInt(e[2]), seq: BigInt(e[3]) },
    });
  }
}

function corrupt(ref: BaseRef): Error {
  return new Error(
    `state store: packed state ${ref.id} is incomplete (expected ${ref.pages} pages)`,
  );
}
