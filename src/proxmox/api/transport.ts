// The byte-level HTTP seam: HTTP/1.1 over node:tls sockets that tls.ts has
// verified against the configured CA and/or pin, in every trust mode. The API
// layer above only sees RawResponse.
//
// Connections are kept alive and reused (a TLS handshake per request would
// cost the clone/agent polling loops dearly; bench/transport_bench.ts). A
// parked connection was verified when it was opened and carries nothing but
// our own requests, so reuse keeps "every connection is checked".

import type tls from "node:tls";
import { TransportError } from "./errors.ts";
import { encodeRequest, type RawRequest, type RawResponse, ResponseParser } from "./http1.ts";
import { connectVerified, type TrustMaterial } from "./tls.ts";

// The message shapes are HTTP/1.1's (http1.ts); the layer above takes them from here.
export type { RawRequest, RawResponse };

export interface Transport {
  send(req: RawRequest, signal: AbortSignal): Promise<RawResponse>;
  close(): void;
}

export interface PoolOptions {
  /** Idle connections kept per host. */
  maxIdle: number;
  /** An idle connection is closed after this long (below pveproxy's keep-alive timeout). */
  idleMs: number;
}

const DEFAULT_POOL: PoolOptions = { maxIdle: 8, idleMs: 2500 };

/** A reused connection the server had already closed: nothing was answered. */
class StaleConnectionError extends TransportError {}

interface Parked {
  socket: tls.TLSSocket;
  timer: ReturnType<typeof setTimeout>;
  drop: () => void;
}

/** One request/response exchange on a verified socket. */
function exchange(
  socket: tls.TLSSocket,
  bytes: Uint8Array,
  reused: boolean,
  signal: AbortSignal,
): Promise<{ res: RawResponse; keepAlive: boolean }> {
  return new Promise((resolve, reject) => {
    const parser = new ResponseParser();
    let settled = false;
    const finish = (err: unknown) => {
      if (settled) return;
      settled = true;
      socket.off("data", onData).off("end", onEnd).off("close", onClose).off("error", onError);
      signal.removeEventListener("abort", onAbort);
      if (err !== null) {
        socket.destroy();
        return reject(err);
      }
      resolve({ res: parser.response(), keepAlive: parser.keepAlive });
    };
    const lost = (why: string) =>
      reused && !parser.sawBytes
        ? new StaleConnectionError(`kept-alive connection closed: ${why}`)
        : new TransportError(`request failed: ${why}`);
    const onData = (d: Uint8Array) => {
      try {
        parser.feed(new Uint8Array(d));
      } catch (e) {
        return finish(e);
      }
      if (parser.done) finish(null);
    };
    const onEnd = () => {
      try {
        parser.end();
        finish(null);
      } catch (e) {
        finish(parser.sawBytes ? e : lost("closed by the server"));
      }
    };
    const onClose = () => onEnd();
    const onError = (e: Error) => finish(lost(e.message));
    const onAbort = () => finish(signal.reason ?? new DOMException("aborted", "AbortError"));
    if (signal.aborted) return onAbort();
    socket.on("data", onData).on("end", onEnd).on("close", onClose).on("error", onError);
    signal.addEventListener("abort", onAbort, { once: true });
    socket.write(bytes);
  });
}

/** Every trust mode: verified node:tls connections, kept alive between requests. */
export function verifiedTransport(trust: TrustMaterial, pool = DEFAULT_POOL): Transport {
  const idle = new Map<string, Parked[]>();
  let closed = false;

  function take(host: string): tls.TLSSocket | null {
    const list = idle.get(host) ?? [];
    for (let p = list.pop(); p !== undefined; p = list.pop()) {
      clearTimeout(p.timer);
      p.socket.off("data", p.drop).off("end", p.drop).off("close", p.drop).off("error", p.drop);
      if (!p.socket.destroyed && p.socket.writable) return p.socket;
      p.socket.destroy();
    }
    return null;
  }

  function park(host: string, socket: tls.TLSSocket): void {
    const list = idle.get(host) ?? [];
    idle.set(host, list);
    if (closed || list.length >= pool.maxIdle || socket.destroyed) return void socket.destroy();
    // Anything happening on an idle connection (the server closing it, stray
    // bytes) makes it unusable: drop it.
    const entry: Parked = {
      socket,
      timer: setTimeout(() => entry.drop(), pool.idleMs),
      drop: () => {
        clearTimeout(entry.timer);
        const i = list.indexOf(entry);
        if (i >= 0) list.splice(i, 1);
        socket.destroy();
      },
    };
    socket.on("data", entry.drop).on("end", entry.drop).on("close", entry.drop).on(
      "error",
      entry.drop,
    );
    list.push(entry);
  }

  return {
    async send(req, signal) {
      const bytes = encodeRequest(req);
      const host = req.url.host;
      for (;;) {
        let socket = take(host);
        const reused = socket !== null;
        socket ??= await connectVerified(req.url, trust, signal);
        try {
          const { res, keepAlive } = await exchange(socket, bytes, reused, signal);
          if (keepAlive) park(host, socket);
          else socket.destroy();
          return res;
        } catch (err) {
          socket.destroy();
          // The server closed a parked connection as we wrote: a GET is safe to send
          // again on a fresh one. Anything else may have been received: the caller decides.
          if (err instanceof StaleConnectionError && req.method === "GET") continue;
          throw err;
        }
      }
    },
    close() {
      closed = true;
      for (const list of idle.values()) {
        for (const p of list.splice(0)) {
          clearTimeout(p.timer);
          p.socket.destroy();
        }
      }
    },
  };
}
