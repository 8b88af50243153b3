// The listener on its own, with tiny limits: the connection cap sheds
// handshaking connections first, the handshake deadline, the preface check,
// GOAWAY removal on the way to the HTTP/2 stack, the unread-bytes cap, and
// under TLS: ALPN h2 only and the client certificate looked up by peer.

import assert from "node:assert/strict";
import type { Duplex } from "node:stream";
import * as tls from "node:tls";
import { CLIENT_PREFACE } from "../../src/server/goaway_filter.ts";
import { type Listener, peerKey, startListener } from "../../src/server/listener.ts";
import { listenerTls } from "../../src/server/tls.ts";
import { issueCert, makeCa } from "../pvesim/certs.ts";
import { concat, frame } from "./hostile_clients.ts";
import { waitFor } from "./helpers.ts";

const LIMITS = { maxConnections: 3, handshakeTimeoutMs: 400, maxUnreadBytes: 256 * 1024 };
const SETTINGS = frame(0x4, 0, 0, new Uint8Array());
const GOAWAY = frame(0x7, 0, 0, new Uint8Array(8));
const PING = frame(0x6, 0, 0, new Uint8Array(8));

interface Delivered {
  stream: Duplex;
  bytes: Uint8Array[];
}

async function start(
  o: { tls?: tls.TlsOptions; limits?: typeof LIMITS } = {},
): Promise<{ listener: Listener; delivered: Delivered[] }> {
  const delivered: Delivered[] = [];
  const listener = await startListener({
    host: "127.0.0.1",
    port: 0,
    tls: o.tls ?? null,
    limits: o.limits ?? LIMITS,
    onConnection(stream) {
      const d: Delivered = { stream, bytes: [] };
      stream.on("data", (b: Uint8Array) => d.bytes.push(new Uint8Array(b)));
      delivered.push(d);
    },
  });
  return { listener, delivered };
}

/** A client connection that notices when the server closes it. */
async function client(port: number) {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  let closed = false;
  const received: Uint8Array[] = [];
  const reading = (async () => {
    const buf = new Uint8Array(64 * 1024);
    try {
      for (let n; (n = await conn.read(buf)) !== null;) received.push(buf.slice(0, n));
    } catch { /* reset */ }
    closed = true;
  })();
  return {
    conn,
    received,
    closed: () => closed,
    send: async (b: Uint8Array) => {
      let off = 0;
      while (off < b.length) off += await conn.write(b.subarray(off));
    },
    async close() {
      try {
        conn.close();
      } catch { /* closed */ }
      await reading;
    },
  };
}

Deno.test("listener: the cap sheds the oldest handshaking connection, then refuses", async () => {
  const { listener, delivered } = await start();
  const clients = [];
  try {
    const idle = [await client(listener.port), await client(listener.port)];
    clients.push(...idle);
    const a = await client(listener.port);
    clients.push(a);
    await a.send(concat([CLIENT_PREFACE, SETTINGS]));
    await waitFor("a delivered", () => delivered.length === 1 || undefined);
    assert.equal(listener.size, 3);

    // Full: the fourth pushes out the oldest idle one.
    const b = await client(listener.port);
    clients.push(b);
    await waitFor("oldest idle shed", () => idle[0].closed() || undefined);
    assert.equal(idle[1].closed(), false);
    await b.send(CLIENT_PREFACE);
    const c = await client(listener.port);
    clients.push(c);
    await waitFor("second idle shed", () => idle[1].closed() || undefined);
    await c.send(CLIENT_PREFACE);
    await waitFor("b and c delivered", () => delivered.length === 3 || undefined);

    // Every slot holds an HTTP/2 connection: a newcomer is refused.
    const d = await client(listener.port);
    clients.push(d);
    await waitFor("newcomer refused", () => d.closed() || undefined);
    assert.ok(!a.closed() && !b.closed() && !c.closed(), "established connections kept");
    assert.equal(delivered.length, 3);
  } finally {
    for (const c of clients) await c.close();
    listener.destroyAll();
    await listener.close();
  }
});

Deno.test("listener: handshake deadline, preface check, GOAWAY removed on the way in", async () => {
  const { listener, delivered } = await start();
  const clients = [];
  try {
    const silent = await client(listener.port);
    const trickle = await client(listener.port);
    clients.push(silent, trickle);
    await trickle.send(CLIENT_PREFACE.subarray(0, 10));
    await waitFor("silent closed at the deadline", () => silent.closed() || undefined, 3_000);
    await waitFor("half a preface closed too", () => trickle.closed() || undefined, 3_000);

    const http1 = await client(listener.port);
    clients.push(http1);
    await http1.send(new TextEncoder().encode("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
    await waitFor("HTTP/1 closed", () => http1.closed() || undefined, 1_000);

    const h2 = await client(listener.port);
    clients.push(h2);
    await h2.send(concat([CLIENT_PREFACE, SETTINGS, GOAWAY]));
    await h2.send(PING);
    await waitFor("frames through", () => {
      const got = concat(delivered[0]?.bytes ?? []);
      return got.length === CLIENT_PREFACE.length + SETTINGS.length + PING.length || undefined;
    });
    assert.deepEqual(concat(delivered[0].bytes), concat([CLIENT_PREFACE, SETTINGS, PING]));
    assert.equal(delivered.length, 1, "only the HTTP/2 client reached the stack");
    assert.equal(h2.closed(), false);
  } finally {
    for (const c of clients) await c.close();
    listener.destroyAll();
    await listener.close();
  }
});

Deno.test("listener: a client that leaves answers unread is cut at the cap", async () => {
  const { listener, delivered } = await start();
  const c = await Deno.connect({ hostname: "127.0.0.1", port: listener.port });
  try {
    await c.write(CLIENT_PREFACE);
    await waitFor("delivered", () => delivered.length === 1 || undefined);
    const stream = delivered[0].stream;
    let closed = false;
    stream.on("close", () => closed = true);
    // Far more than socket buffers and the 256 KiB cap hold; nobody reads.
    const chunk = new Uint8Array(64 * 1024);
    for (let i = 0; i < 400 && !closed; i++) {
      stream.write(chunk);
      await new Promise((r) => setTimeout(r, 0));
    }
    await waitFor("cut", () => closed || undefined);
  } finally {
    try {
      c.close();
    } catch { /* closed */ }
    listener.destroyAll();
    await listener.close();
  }
});

Deno.test("listener: TLS wants ALPN h2, keeps the cap, and knows each client's certificate", async () => {
  const dir = await Deno.makeTempDir({ prefix: "listener-tls-" });
  const ca = await makeCa(dir, "listener-root");
  const server = await issueCert(ca, { cn: "p", sans: ["127.0.0.1"], usage: "server" });
  const shard = await issueCert(ca, {
    cn: "shard-a",
    usage: "client",
    uriSans: ["bigfleet://shard/shard-a"],
  });
  const { tls: options } = listenerTls({
    certPem: server.certPem,
    keyPem: server.keyPem,
    caPem: ca.certPem,
  });
  const { listener, delivered } = await start({
    tls: options!,
    limits: { ...LIMITS, maxConnections: 2 },
  });
  const open: tls.TLSSocket[] = [];
  const connect = (alpn: string[]) =>
    new Promise<tls.TLSSocket>((resolve, reject) => {
      const s = tls.connect({
        host: "127.0.0.1",
        port: listener.port,
        ca: [ca.certPem],
        cert: shard.certPem,
        key: shard.keyPem,
        ALPNProtocols: alpn,
      }, () => resolve(s));
      s.on("error", reject);
      open.push(s);
    });
  try {
    const a = await connect(["h2"]);
    a.write(CLIENT_PREFACE);
    await waitFor("delivered over TLS", () => delivered.length === 1 || undefined);
    const key = peerKey(a.localAddress, a.localPort);
    assert.match(
      listener.peerCertificate(key)?.subjectaltname ?? "",
      /bigfleet:\/\/shard\/shard-a/,
    );
    assert.equal(listener.peerCertificate("127.0.0.1:1"), undefined, "no such connection");

    // Without ALPN h2 (none offered, or only http/1.1): never handed on, preface or not.
    for (const alpn of [[], ["http/1.1"]]) {
      const other = await connect(alpn).catch((e: Error) => e);
      if (other instanceof Error) continue; // refused in the handshake
      other.write(CLIENT_PREFACE);
      await waitFor(
        `ALPN ${alpn} closed`,
        () => other.destroyed || other.readyState === "closed" || undefined,
      );
    }
    assert.equal(delivered.length, 1);

    // The second slot, then a newcomer while both are established: refused, and nothing breaks.
    const b = await connect(["h2"]);
    b.write(CLIENT_PREFACE);
    await waitFor("second delivered", () => delivered.length === 2 || undefined);
    const late = await connect(["h2"]).catch((e: Error) => e);
    if (!(late instanceof Error)) {
      await waitFor(
        "newcomer closed",
        () => late.destroyed || late.readyState === "closed" || undefined,
      );
    }
    assert.equal(delivered.length, 2);

    a.destroy();
    await waitFor(
      "certificate forgotten",
      () => listener.peerCertificate(key) === undefined || undefined,
    );
  } finally {
    for (const s of open) s.destroy();
    listener.destroyAll();
    await listener.close();
  }
});

Deno.test("listener: a port in use is one clear error", async () => {
  const { listener } = await start();
  try {
    await assert.rejects(
      startListener({
        host: "127.0.0.1",
        port: listener.port,
        tls: null,
        limits: LIMITS,
        onConnection: () => {},
      }),
      new RegExp(
        `^Error: cannot listen on 127\\.0\\.0\\.1:${listener.port}: address already in use$`,
      ),
    );
  } finally {
    await listener.close();
  }
});
