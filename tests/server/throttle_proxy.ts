// A TCP proxy for server tests. It can slow the client→server direction to a
// fixed rate, so a large request stays in flight for as long as a test needs
// (server→client is never throttled), and it shows a test every client→server
// chunk it forwards. Each side's TCP close is passed on to the other.

export interface TestProxy {
  readonly port: number;
  /** Client→server bytes forwarded so far. */
  readonly upstreamBytes: number;
  /** Connections accepted so far. */
  readonly connections: number;
  /** Connections not yet closed by both sides. */
  readonly open: number;
  close(): Promise<void>;
}

export interface ProxyOptions {
  /** Client→server rate; unlimited when absent. */
  bytesPerSecond?: number;
  /** Sees a copy of each client→server chunk, with the index of its connection. */
  onUpstream?: (connection: number, bytes: Uint8Array) => void;
}

const CHUNK = 16 * 1024;

export function startProxy(targetPort: number, o: ProxyOptions = {}): TestProxy {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns = new Set<Deno.TcpConn>();
  const tasks: Promise<unknown>[] = [];
  let upstreamBytes = 0;
  let connections = 0;
  let open = 0;

  async function pump(from: Deno.TcpConn, to: Deno.TcpConn, upstream: number | null) {
    const buf = new Uint8Array(CHUNK);
    const started = performance.now();
    let sent = 0;
    for (;;) {
      const n = await from.read(buf);
      if (n === null) break;
      const bytes = buf.subarray(0, n);
      if (upstream !== null) o.onUpstream?.(upstream, bytes.slice());
      await writeAll(to, bytes);
      if (upstream === null) continue;
      sent += n;
      upstreamBytes += n;
      if (o.bytesPerSecond === undefined) continue;
      const wait = started + (sent / o.bytesPerSecond) * 1000 - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
    // Pass the end on, so each side sees the other's TCP close.
    await to.closeWrite().catch(() => {});
  }

  async function relay(client: Deno.TcpConn, index: number): Promise<void> {
    open++;
    conns.add(client);
    let server: Deno.TcpConn | undefined;
    try {
      server = await Deno.connect({ hostname: "127.0.0.1", port: targetPort });
      conns.add(server);
      // Unbatched, like a direct connection: small frames must not wait.
      client.setNoDelay(true);
      server.setNoDelay(true);
      await Promise.allSettled([pump(client, server, index), pump(server, client, null)]);
    } catch { /* upstream gone: the client sees its connection close */ }
    for (const c of [client, server]) if (c) closeQuietly(c, conns);
    open--;
  }

  const accepting = (async () => {
    for await (const client of listener) tasks.push(relay(client, connections++));
  })().catch(() => {});

  return {
    port: (listener.addr as Deno.NetAddr).port,
    get upstreamBytes() {
      return upstreamBytes;
    },
    get connections() {
      return connections;
    },
    get open() {
      return open;
    },
    async close() {
      listener.close();
      for (const c of [...conns]) closeQuietly(c, conns);
      await accepting;
      await Promise.allSettled(tasks);
    },
  };
}

/** The proxy of shutdown_test.ts: client→server at `bytesPerSecond`. */
export function startThrottleProxy(targetPort: number, bytesPerSecond: number): TestProxy {
  return startProxy(targetPort, { bytesPerSecond });
}

function closeQuietly(c: Deno.TcpConn, conns: Set<Deno.TcpConn>): void {
  conns.delete(c);
  try {
    c.close();
  } catch { /* already closed */ }
}

async function writeAll(conn: Deno.Conn, data: Uint8Array): Promise<void> {
  let off = 0;
  while (off < data.length) off += await conn.write(data.subarray(off));
}
