// The gRPC port's accept loop. The listener owns the TCP (and TLS) side and
// hands each connection to grpc-js only once its HTTP/2 client preface has
// arrived, as a stream whose client bytes pass through the frame guard
// (src/server/goaway_filter.ts). On the way it enforces the connection
// limits of src/server/limits.ts: a connection cap that sheds half-open
// connections first, one deadline for the TLS handshake plus the preface, and
// a cap on response bytes a client leaves unread. Why the listener is ours
// and not grpc-js's: docs/security.md#the-http2-frame-guard.

import { getLogger } from "@logtape/logtape";
import * as net from "node:net";
import type { Duplex } from "node:stream";
import * as tls from "node:tls";
import { GuardedStream, peerKey } from "./guarded_stream.ts";
import type { ListenerLimits } from "./limits.ts";

const log = getLogger(["bigfleet", "listener"]);
/** How long a connection we have finished with waits for the client to close its end. */
const LINGER_MS = 5_000;

export interface ListenerOptions {
  host: string;
  port: number;
  /** node:tls server options; null serves plaintext HTTP/2 (h2c). */
  tls: tls.TlsOptions | null;
  limits: ListenerLimits;
  /** Called once per connection, after the client preface, with the guarded stream. */
  onConnection(stream: Duplex): void;
}

export interface Listener {
  readonly port: number;
  /** Open connections, handshaking ones included. */
  readonly size: number;
  /**
   * The verified client certificate of the live TLS connection `peer`
   * ("address:port", as grpc-js's call.getPeer() gives it); undefined when
   * no such connection is open, null when it presented none.
   */
  peerCertificate(peer: string): tls.PeerCertificate | null | undefined;
  /** Stop accepting and drop connections that have not reached HTTP/2 yet; resolves once all are gone. */
  close(): Promise<void>;
  /** Drop every connection. */
  destroyAll(): void;
}

export { peerKey };

export async function startListener(opts: ListenerOptions): Promise<Listener> {
  const { limits } = opts;
  /** Every open connection, oldest first; true once it reached HTTP/2. */
  const open = new Map<net.Socket, boolean>();
  const tlsPeers = new Map<string, GuardedStream>();
  let lastCapWarning = 0;

  function admit(raw: net.Socket): boolean {
    if (open.size >= limits.maxConnections) {
      // Shed the oldest connection still in its handshake; with none, refuse.
      const victim = [...open].find(([, established]) => !established)?.[0];
      const now = Date.now();
      if (now - lastCapWarning > 60_000) {
        lastCapWarning = now;
        log.warn("connection limit reached ({max}); dropping handshaking connections first", {
          max: limits.maxConnections,
        });
      }
      if (!victim) {
        raw.destroy();
        return false;
      }
      victim.destroy();
      open.delete(victim);
    }
    open.set(raw, false);
    raw.on("close", () => open.delete(raw));
    raw.on("error", (e) => log.debug("connection error: {error}", { error: String(e) }));
    // Covers the TLS handshake and the preface: a client that trickles
    // either (slow loris) or says nothing holds a slot this long at most.
    const timer = setTimeout(() => {
      if (open.get(raw) === false) {
        log.debug("no HTTP/2 preface within {ms} ms from {peer}", {
          ms: limits.handshakeTimeoutMs,
          peer: peerKey(raw.remoteAddress, raw.remotePort),
        });
        raw.destroy();
      }
    }, limits.handshakeTimeoutMs);
    raw.on("close", () => clearTimeout(timer));
    return true;
  }

  function guard(raw: net.Socket, plain: net.Socket, cert: tls.PeerCertificate | null): void {
    const conn: GuardedStream = new GuardedStream(plain, {
      preface: true,
      maxUnread: limits.maxUnreadBytes,
      lingerMs: LINGER_MS,
      onPreface: () => {
        // Shed or closed meanwhile: nothing to hand on.
        if (raw.destroyed || !open.has(raw)) return conn.destroy();
        open.set(raw, true);
        opts.onConnection(conn);
      },
    });
    if (plain instanceof tls.TLSSocket) {
      const key = peerKey(conn.remoteAddress, conn.remotePort);
      conn.certificate = cert;
      tlsPeers.set(key, conn);
      conn.on("close", () => {
        if (tlsPeers.get(key) === conn) tlsPeers.delete(key);
      });
    }
  }

  let server: net.Server;
  if (opts.tls) {
    const secure = tls.createServer({
      ...opts.tls,
      handshakeTimeout: limits.handshakeTimeoutMs,
    }, (sock) => {
      const raw = rawOf(sock);
      if (sock.alpnProtocol !== "h2") {
        // Same answer as an HTTP/2-only server: no h2, no connection.
        log.debug("TLS client without ALPN h2 refused");
        sock.destroy();
        return;
      }
      sock.on("error", () => {});
      const cert = sock.getPeerCertificate();
      guard(raw, sock, cert && cert.raw ? cert : null);
    });
    secure.prependListener("connection", (raw: net.Socket) => {
      admit(raw);
    });
    secure.on("tlsClientError", (e: Error) => {
      log.debug("TLS handshake failed: {error}", { error: e.message });
    });
    server = secure;
  } else {
    server = net.createServer((raw) => {
      if (admit(raw)) guard(raw, raw, null);
    });
  }
  /** The TCP socket under a TLS socket: the live one with the same peer address and port. */
  function rawOf(sock: tls.TLSSocket): net.Socket {
    for (const raw of open.keys()) {
      if (raw.remotePort === sock.remotePort && raw.remoteAddress === sock.remoteAddress) {
        return raw;
      }
    }
    return sock;
  }

  server.on("error", (e) => log.error("listener error: {error}", { error: String(e) }));
  const port = await new Promise<number>((resolve, reject) => {
    const onError = (e: Error & { code?: string }) => {
      const inUse = e.code === "EADDRINUSE";
      const target = opts.host.includes(":")
        ? `[${opts.host}]:${opts.port}`
        : `${opts.host}:${opts.port}`;
      reject(
        new Error(`cannot listen on ${target}: ${inUse ? "address already in use" : String(e)}`),
      );
    };
    server.once("error", onError);
    server.listen(opts.port, opts.host, () => {
      server.off("error", onError);
      resolve((server.address() as net.AddressInfo).port);
    });
  });

  return {
    port,
    get size() {
      return open.size;
    },
    peerCertificate(peer) {
      const conn = tlsPeers.get(peer);
      return conn ? conn.certificate : undefined;
    },
    close() {
      for (const [raw, established] of open) if (!established) raw.destroy();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
    destroyAll() {
      for (const raw of open.keys()) raw.destroy();
    },
  };
}
