// Packed snapshots ("bases") of the whole state. Deno KV pays ~9 µs per entry
// a list returns whatever its size, so a fleet kept as one key per record
// takes ~180 ms to read per 20,000 machines; the same records packed ~60 KB
// to a value read in a few ms. Its rules:
//
// - A base is a sequence of pages under ["b", base id, page, n], each page
//   cut into values of at most VALUE_MAX_BYTES. A page is the JSON object
//   {"d": dictionary, "m": machines, "f": fences}: records in the packed form
//   of src/store/record_codec.ts, fence marks as [shard, machine, epoch, seq]
//   with the numbers as decimal strings.
// - A base is written under a fresh id beside whatever is in use, in commits
//   of ~BASE_COMMIT_BYTES (so lifecycle commits do not queue long behind
//   it), one in flight while the next is packed; the last commit, once
//   every page has landed, sets ["meta", "base"] to its BaseRef together with
//   the caller's tail. Until then nothing reads it, so a write cut short
//   leaves only pages of an id nothing points at.
// - A load reads the base the pointer names and checks its page count.

import { Buffer } from "node:buffer";
import { commitAll, mutation, slices } from "./kv_commit.ts";
import type { Mutation } from "./kv_commit.ts";
import { BASE_KEY, baseKey } from "./kv_layout.ts";
import type { FenceEntry } from "../kit/store.ts";
import type { MachineRecord } from "../kit/model.ts";
import { packer, unpacker } from "./record_codec.ts";

/** Where a base lives and how many pages it has; the pointer to the current one holds this. */
export interface BaseRef {
  id: string;
  pages: number;
  /** The first overlay generation that applies on top of this base (on disk as `gen`). */
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
/** Base pages per commit: small commits keep lifecycle commits from queueing long behind them. */
const BASE_COMMIT_BYTES = 130_000;

const enc = new TextEncoder();
const dec = new TextDecoder();

/**
 * Writes `machines` and `fences` as base `id`, then points the file at it in
 * one commit with `tail`. Resolves to the new base's ref.
 */
export async function writeBase(
  kv: Deno.Kv,
  at: Omit<BaseRef, "pages">,
  machines: readonly MachineRecord[],
  fences: readonly FenceEntry[],
  tail: Mutation[],
): Promise<BaseRef> {
  const ref: BaseRef = { ...at, pages: 0 };
  let batch: Mutation[] = [];
  let bytes = 0;
  // One commit in flight while the next pages are packed: the disk's work
  // and the packing overlap (a fresh start of 20,000 machines writes ~18).
  let committing: Promise<void> = Promise.resolve();
  try {
    for (const page of packBase(machines, fences)) {
      page.forEach((value, n) => {
        batch.push(mutation([...baseKey(ref.id), ref.pages, n], value));
        bytes += value.length;
      });
      ref.pages++;
      if (bytes >= BASE_COMMIT_BYTES) {
        await committing;
        committing = commitAll(kv, batch);
        batch = [];
        bytes = 0;
      }
    }
  } catch (e) {
    // Packing failed: the commit in flight is given up on, not left to reject unheard.
    committing.catch(() => {});
    throw e;
  }
  // Every page is committed before the pointer that makes them the base.
  await committing;
  await commitAll(kv, batch, [mutation(BASE_KEY, ref), ...tail]);
  return ref;
}

/**
 * The base's pages in order, each as its KV values. A generator, so a caller
 * can commit a few pages at a time and yield the event loop between them.
 */
function* packBase(
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
