// Commit splitting: Deno KV commits at most 1,000 mutations and 800 KiB at
// once, and a value holds at most 64 KiB. `commitAll` spreads a run of
// mutations over as many atomic commits as it needs, within limits that keep
// a margin under KV's, and puts its `tail` together in the last one: what the
// tail sets is on disk only once everything before it is. Every multi-commit
// write of the store (a base, a redo batch, chunks) is built on that.

const ATOMIC_MAX_BYTES = 600_000;
const ATOMIC_MAX_OPS = 500;
/** The largest value the store writes (KV allows 64 KiB). */
export const VALUE_MAX_BYTES = 60_000;

/** One KV write: a set, or a delete when `value` is undefined. `size` bounds its encoded bytes. */
export interface Mutation {
  key: Deno.KvKey;
  value?: unknown;
  size: number;
}

/**
 * A mutation with a generous bound on its encoded size: keys count 3 bytes
 * per UTF-16 unit; a value counts its bytes (a Uint8Array, or those directly
 * under an object such as an overlay value's record) and 64 for the rest,
 * since nothing else the store writes is large.
 */
export function mutation(key: Deno.KvKey, value?: unknown): Mutation {
  let size = 64;
  for (const part of key) size += typeof part === "string" ? part.length * 3 : 16;
  if (value instanceof Uint8Array) size += value.length;
  else if (value && typeof value === "object") {
    for (const v of Object.values(value)) if (v instanceof Uint8Array) size += v.length;
  }
  return { key, value, size };
}

export const deletion = (key: Deno.KvKey): Mutation => mutation(key);

/** Whether `ms` fit one atomic commit. */
export function fitsOneCommit(ms: readonly Mutation[]): boolean {
  return ms.length <= ATOMIC_MAX_OPS && ms.reduce((s, m) => s + m.size, 0) <= ATOMIC_MAX_BYTES;
}

/** Commits `ops` over as many commits as needed; `tail` lands together in the last one. */
export async function commitAll(
  kv: Deno.Kv,
  ops: readonly Mutation[],
  tail: readonly Mutation[] = [],
): Promise<void> {
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

/** Deletes every key under `prefix`; returns how many there were. */
export async function deleteAll(kv: Deno.Kv, prefix: Deno.KvKey): Promise<number> {
  const keys: Deno.KvKey[] = [];
  for await (const e of kv.list({ prefix })) keys.push(e.key);
  await commitAll(kv, keys.map(deletion));
  return keys.length;
}

/** `bytes` cut into KV values of at most VALUE_MAX_BYTES (views, not copies). */
export function slices(bytes: Uint8Array): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (let off = 0; off < bytes.length; off += VALUE_MAX_BYTES) {
    out.push(bytes.subarray(off, off + VALUE_MAX_BYTES));
  }
  return out;
}

function addTo(op: Deno.AtomicOperation, m: Mutation): void {
  if (m.value === undefined) op.delete(m.key);
  else op.set(m.key, m.value);
}

export async function mustCommit(op: Deno.AtomicOperation): Promise<void> {
  const res = await op.commit();
  if (!res.ok) throw new Error("state store atomic commit was rejected");
}

export function message(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}
