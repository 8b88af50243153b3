// The List cursor: the global revision as ASCII decimal. Parsing is strict,
// like Go's strconv.ParseInt: anything else is "no cursor" (a full list), never
// an error (docs/design.md#list-and-the-cursor).

const DECIMAL = /^[+-]?[0-9]+$/;
const MIN = -(2n ** 63n);
const MAX = 2n ** 63n - 1n;
const decoder = new TextDecoder("utf-8", { fatal: false });

export function encodeRevision(rev: number): Uint8Array {
  return new TextEncoder().encode(String(rev));
}

/** The cursor value, or null when the bytes are empty or not a strict int64 decimal. */
export function parseRevision(bytes: Uint8Array | undefined): bigint | null {
  if (!bytes || bytes.length === 0 || bytes.length > 24) return null;
  const text = decoder.decode(bytes);
  if (!DECIMAL.test(text)) return null;
  const value = BigInt(text);
  return value < MIN || value > MAX ? null : value;
}
