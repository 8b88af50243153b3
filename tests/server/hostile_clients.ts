// Misbehaving HTTP/2 clients, written frame by frame over plain TCP, for the
// overload test and bench/hostile.ts: connections that never speak, a preface
// trickled byte by byte, a request that declares 5 MiB and stalls, and a
// client that opens thousands of streams and never reads an answer.

import { CLIENT_PREFACE } from "../../src/server/goaway_filter.ts";

const DATA = 0x0, HEADERS = 0x1, SETTINGS = 0x4, WINDOW_UPDATE = 0x8;
const END_STREAM = 0x1, END_HEADERS = 0x4;
const SETTINGS_INITIAL_WINDOW_SIZE = 0x4;
const MAX_WINDOW = 0x7fffffff;

export function frame(type: number, flags: number, streamId: number, payload: Uint8Array) {
  const f = new Uint8Array(9 + payload.length);
  f[0] = payload.length >> 16;
  f[1] = (payload.length >> 8) & 0xff;
  f[2] = payload.length & 0xff;
  f[3] = type;
  f[4] = flags;
  new DataView(f.buffer).setUint32(5, streamId);
  f.set(payload, 9);
  return f;
}

export function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/** HPACK literal fields without indexing (RFC 7541 §6.2.2): no state to keep. */
function headerBlock(fields: [string, string][]): Uint8Array {
  const out: number[] = [];
  const enc = new TextEncoder();
  for (const [name, value] of fields) {
    const n = enc.encode(name), v = enc.encode(value);
    if (n.length > 126 || v.length > 126) throw new Error("field too long for this encoder");
    out.push(0x00, n.length, ...n, v.length, ...v);
  }
  return new Uint8Array(out);
}

/** HEADERS of a gRPC call to `method` of the CapacityProvider. */
export function grpcHeaders(streamId: number, method: string): Uint8Array {
  return frame(
    HEADERS,
    END_HEADERS,
    streamId,
    headerBlock([
      [":method", "POST"],
      [":scheme", "http"],
      [":path", `/bigfleet.v1alpha1.CapacityProvider/${method}`],
      [":authority", "localhost"],
      ["content-type", "application/grpc"],
      ["te", "trailers"],
    ]),
  );
}

/** A gRPC length prefix declaring `length` message bytes, followed by `body`. */
export function grpcMessage(length: number, body: Uint8Array = new Uint8Array()): Uint8Array {
  const m = new Uint8Array(5 + body.length);
  new DataView(m.buffer).setUint32(1, length);
  m.set(body, 5);
  return m;
}

function settings(entries: [number, number][]): Uint8Array {
  const p = new Uint8Array(entries.length * 6);
  const dv = new DataView(p.buffer);
  entries.forEach(([id, value], i) => {
    dv.setUint16(i * 6, id);
    dv.setUint32(i * 6 + 2, value);
  });
  return frame(SETTINGS, 0, 0, p);
}

function windowUpdate(streamId: number, increment: number): Uint8Array {
  const p = new Uint8Array(4);
  new DataView(p.buffer).setUint32(0, increment);
  return frame(WINDOW_UPDATE, 0, streamId, p);
}

async function writeAll(conn: Deno.Conn, data: Uint8Array): Promise<void> {
  let off = 0;
  while (off < data.length) off += await conn.write(data.subarray(off));
}

function connect(port: number): Promise<Deno.TcpConn> {
  return Deno.connect({ hostname: "127.0.0.1", port });
}

export interface Hostile {
  /** Connections of this kind the server has closed so far. */
  closedByServer(): number;
  close(): void;
}

/** Watches each connection for the server closing it (EOF or reset), reading nothing else. */
function watch(conns: Deno.TcpConn[], read: boolean): Hostile {
  let closed = 0;
  if (read) {
    for (const c of conns) {
      (async () => {
        const buf = new Uint8Array(64 * 1024);
        try {
          while (await c.read(buf) !== null) { /* discard */ }
        } catch { /* reset */ }
        closed++;
      })();
    }
  }
  return {
    closedByServer: () => closed,
    close() {
      for (const c of conns) {
        try {
          c.close();
        } catch { /* already closed */ }
      }
    },
  };
}

/** `n` TCP connections that never send a byte. */
export async function idleConnections(port: number, n: number): Promise<Hostile> {
  const conns: Deno.TcpConn[] = [];
  for (let i = 0; i < n; i += 50) {
    const batch = Math.min(50, n - i);
    conns.push(...await Promise.all(Array.from({ length: batch }, () => connect(port))));
  }
  return watch(conns, true);
}

/** `n` connections sending the client preface one byte every `intervalMs`. */
export async function slowLoris(port: number, n: number, intervalMs: number): Promise<Hostile> {
  const conns = await Promise.all(Array.from({ length: n }, () => connect(port)));
  let stopped = false;
  for (const c of conns) {
    (async () => {
      for (const b of CLIENT_PREFACE) {
        if (stopped) return;
        try {
          await writeAll(c, new Uint8Array([b]));
        } catch {
          return; // closed by the server
        }
        await new Promise((r) => setTimeout(r, intervalMs));
      }
    })();
  }
  const h = watch(conns, true);
  return {
    ...h,
    close() {
      stopped = true;
      h.close();
    },
  };
}

/**
 * One connection with one call whose message declares `declared` bytes, of
 * which `sent` are sent; then nothing more, and nothing is read.
 */
export async function stalledUpload(
  port: number,
  method: string,
  declared: number,
  sent: number,
): Promise<Hostile> {
  const c = await connect(port);
  await writeAll(c, CLIENT_PREFACE);
  await writeAll(c, settings([]));
  await writeAll(c, grpcHeaders(1, method));
  // Within the default 64 KiB stream window, in frames of the default 16 KiB.
  const payload = grpcMessage(declared, new Uint8Array(sent - 5));
  for (let off = 0; off < payload.length; off += 16_384) {
    await writeAll(c, frame(DATA, 0, 1, payload.subarray(off, off + 16_384)));
  }
  return watch([c], false);
}

/**
 * One connection that opens `streams` calls to `method` (empty request),
 * `wave` at a time every `pauseMs`, with flow-control windows as large as
 * HTTP/2 allows, and never reads a byte of the answers.
 */
export async function nonReader(
  port: number,
  method: string,
  streams: number,
  wave: number,
  pauseMs: number,
): Promise<Hostile & { sent(): number }> {
  const c = await connect(port);
  await writeAll(c, CLIENT_PREFACE);
  await writeAll(c, settings([[SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW]]));
  await writeAll(c, windowUpdate(0, MAX_WINDOW - 65_535));
  let sent = 0;
  let stopped = false;
  let cut = false;
  const empty = grpcMessage(0);
  (async () => {
    for (let id = 1; sent < streams && !stopped; id += 2) {
      try {
        await writeAll(c, grpcHeaders(id, method));
        await writeAll(c, frame(DATA, END_STREAM, id, empty));
      } catch {
        cut = true; // closed by the server
        return;
      }
      sent++;
      if (sent % wave === 0) await new Promise((r) => setTimeout(r, pauseMs));
    }
  })();
  const h = watch([c], false);
  return {
    ...h,
    closedByServer: () => cut ? 1 : 0,
    sent: () => sent,
    close() {
      stopped = true;
      h.close();
    },
  };
}
