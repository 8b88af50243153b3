// A TCP proxy that slows the client→server direction to a fixed rate, so a
// large request stays in flight for as long as a test needs (server→client
// is unthrottled). Counts the bytes it has forwarded upstream.

export interface ThrottleProxy {
  readonly port: number;
  /** Client→server bytes forwarded so far. */
  readonly upstreamBytes: number;
  close(): Promise<void>;
}

const CHUNK = 16 * 1024;

export function startThrottleProxy(targetPort: number, bytesPerSecond: number): ThrottleProxy {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns: Deno.Conn[] = [];
  const tasks: Promise<unknown>[] = [];
  let upstreamBytes = 0;

  async function pumpSlow(from: Deno.Conn, to: Deno.Conn): Promise<void> {
    const buf = new Uint8Array(CHUNK);
    const started = performance.now();
    let sent = 0;
    for (;;) {
      const n = await from.read(buf);
      if (n === null) break;
      await writeAll(to, buf.subarray(0, n));
      sent += n;
      upstreamBytes += n;
      const due = started + (sent / bytesPerSecond) * 1000;
      const wait = due - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
  }

  async function pumpFast(from: Deno.Conn, to: Deno.Conn): Promise<void> {
    const buf = new Uint8Array(CHUNK);
    for (;;) {
      const n = await from.read(buf);
      if (n === null) break;
      await writeAll(to, buf.subarray(0, n));
    }
  }

  const accepting = (async () => {
    for await (const client of listener) {
      const server = await Deno.connect({ hostname: "127.0.0.1", port: targetPort });
      conns.push(client, server);
      const close = () => {
        for (const c of [client, server]) {
          try {
            c.close();
          } catch { /* already closed */ }
        }
      };
      tasks.push(
        Promise.allSettled([pumpSlow(client, server), pumpFast(server, client)]).then(close),
      );
    }
  })().catch(() => {});

  return {
    port: (listener.addr as Deno.NetAddr).port,
    get upstreamBytes() {
      return upstreamBytes;
    },
    async close() {
      listener.close();
      for (const c of conns) {
        try {
          c.close();
        } catch { /* already closed */ }
      }
      await accepting;
      await Promise.allSettled(tasks);
    },
  };
}

async function writeAll(conn: Deno.Conn, data: Uint8Array): Promise<void> {
  let off = 0;
  while (off < data.length) off += await conn.write(data.subarray(off));
}
