// The admin endpoint's wire format, shared by the provider (src/server/admin.ts)
// and the commands that use it (machines recover, machines room, state backup): one request
// per connection, a JSON line each way, and for a backup the file's bytes
// after the answer line. docs/security.md#the-admin-socket says why a unix
// socket and who may use it.

import type { ZoneRoom } from "../kit/backend.ts";

/** What a command asks of the running provider. */
export type AdminRequest =
  | { op: "recover"; id: string; action: "destroy" | "adopt"; apply: boolean }
  | { op: "backup" }
  | { op: "room" };

/** A machine as an admin answer shows it. */
export interface AdminMachine {
  id: string;
  state: string;
  host: string;
  lastError: string;
}

export type AdminAnswer =
  | {
    ok: true;
    op: "recover";
    plan: string;
    applied: boolean;
    before: AdminMachine;
    /** null when not applied, or when the machine left the inventory. */
    after: AdminMachine | null;
  }
  | {
    ok: true;
    op: "backup";
    /** The bytes of the state file that follow the answer line. */
    bytes: number;
    machines: number;
    fences: number;
    revision: number;
  }
  | {
    ok: true;
    op: "room";
    /** Each zone's room as the backend counts it (machines room). */
    zones: ZoneRoom[];
  }
  | { ok: false; code: AdminCode; error: string };

/** NOT_FOUND: no such machine; REFUSED: not allowed for it; BAD_REQUEST: not understood. */
export type AdminCode = "NOT_FOUND" | "REFUSED" | "UNAVAILABLE" | "BAD_REQUEST" | "INTERNAL";

/** Longest request line accepted. */
export const MAX_REQUEST_BYTES = 64 * 1024;

/**
 * Reads one newline-terminated line (at most `max` bytes) from `conn`, and
 * returns it with whatever arrived after it.
 */
export async function readLine(
  conn: Deno.Conn,
  max: number,
): Promise<{ line: string; rest: Uint8Array }> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  const buf = new Uint8Array(16 * 1024);
  for (;;) {
    const n = await conn.read(buf);
    if (n === null) throw new Error("the connection closed before a full line arrived");
    const chunk = buf.slice(0, n);
    const nl = chunk.indexOf(0x0a);
    if (nl >= 0) {
      chunks.push(chunk.subarray(0, nl));
      const line = new TextDecoder().decode(concat(chunks, size + nl));
      return { line, rest: chunk.subarray(nl + 1) };
    }
    chunks.push(chunk);
    size += n;
    if (size > max) throw new Error(`line longer than ${max} bytes`);
  }
}

function concat(chunks: Uint8Array[], size: number): Uint8Array {
  const out = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

/** Something bytes are written to: a connection, a file, stdout. */
export interface Sink {
  write(p: Uint8Array): Promise<number>;
}

/** Writes all of `bytes` (a write may take only part). */
export async function writeAll(to: Sink, bytes: Uint8Array): Promise<void> {
  for (let off = 0; off < bytes.length;) off += await to.write(bytes.subarray(off));
}

export function encodeLine(value: unknown): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(value) + "\n");
}
