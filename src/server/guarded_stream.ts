// A socket as node:http2 sees it once the frame guard sits in front of it:
// the peer's bytes pass through a GoawayFilter (src/server/goaway_filter.ts),
// our bytes are written straight through. The server's listener hands one per
// client connection to grpc-js (with the preface check, the unread-bytes cap
// and a linger after our end); the CLI's channels read the provider through
// one (src/client/goaway_credentials.ts), since a client reading a server's GOAWAY is
// hit by the same node:http2 defect.

import { getLogger } from "@logtape/logtape";
import type { Buffer } from "node:buffer";
import type * as net from "node:net";
import { Duplex } from "node:stream";
import type * as tls from "node:tls";
import { CLIENT_PREFACE, GoawayFilter, NO_PREFACE } from "./goaway_filter.ts";

const log = getLogger(["bigfleet", "listener"]);

export interface GuardOptions {
  /** The peer is a client: its bytes must start with the HTTP/2 client preface. */
  preface?: boolean;
  /** Close when more than this many of our bytes wait unread by the peer. */
  maxUnread?: number;
  /** Called once, when the preface has arrived (with the first bytes, without `preface`). */
  onPreface?: () => void;
  /** After our end is finished, how long the peer may keep its end open (ms). */
  lingerMs?: number;
}

export function peerKey(address: string | undefined, port: number | undefined): string {
  return `${address}:${port}`;
}

export class GuardedStream extends Duplex {
  readonly #sock: net.Socket;
  readonly #filter: GoawayFilter;
  readonly #maxUnread: number;
  readonly #lingerMs: number;
  #onPreface: (() => void) | null;
  /** The verified client certificate, for a server-side TLS connection. */
  certificate: tls.PeerCertificate | null = null;

  constructor(sock: net.Socket, o: GuardOptions = {}) {
    super({ allowHalfOpen: false });
    this.#sock = sock;
    this.#filter = new GoawayFilter(o.preface ? CLIENT_PREFACE : NO_PREFACE);
    this.#maxUnread = o.maxUnread ?? Infinity;
    this.#lingerMs = o.lingerMs ?? 0;
    this.#onPreface = o.onPreface ?? null;
    // grpc-js and node:http2 listen for 'error' only once they have the stream.
    this.on("error", () => {});
    sock.on("data", (chunk: Buffer) => this.#inbound(chunk));
    sock.on("end", () => this.push(null));
    sock.on("close", () => this.destroy());
    // A reset or a TLS failure ends this stream as the close after it would;
    // unheard, the socket's 'error' would be an uncaught exception.
    sock.on("error", () => this.destroy());
  }

  /** GOAWAY frames the peer sent that were removed. */
  get goawaysDropped(): number {
    return this.#filter.goawaysDropped;
  }

  #inbound(chunk: Uint8Array): void {
    let parts: Uint8Array[];
    try {
      parts = this.#filter.push(chunk);
    } catch (e) {
      log.debug("{peer}: {error}", { peer: this.#peer(), error: (e as Error).message });
      this.destroy();
      return;
    }
    for (const part of parts) {
      if (!this.push(part)) this.#sock.pause();
    }
    if (this.#onPreface && this.#filter.prefaceDone) {
      const start = this.#onPreface;
      this.#onPreface = null;
      start();
    }
  }

  override _read(): void {
    this.#sock.resume();
  }

  override _write(chunk: Uint8Array, _enc: string, done: (e?: Error | null) => void): void {
    this.#sock.write(chunk);
    if (this.#sock.writableLength > this.#maxUnread) {
      log.warn("{peer} left more than {max} response bytes unread; closing its connection", {
        peer: this.#peer(),
        max: this.#maxUnread,
      });
      this.destroy();
    }
    done();
  }

  override _final(done: (e?: Error | null) => void): void {
    this.#sock.end();
    if (this.#lingerMs > 0) {
      // Our side is done; a peer that never closes its own may not keep the slot.
      const linger = setTimeout(() => this.#sock.destroy(), this.#lingerMs);
      this.#sock.once("close", () => clearTimeout(linger));
    }
    done();
  }

  override _destroy(_e: Error | null, done: (e?: Error | null) => void): void {
    this.#sock.destroy();
    done(null);
  }

  #peer(): string {
    return peerKey(this.remoteAddress, this.remotePort);
  }

  get remoteAddress(): string | undefined {
    return this.#sock.remoteAddress;
  }
  get remotePort(): number | undefined {
    return this.#sock.remotePort;
  }
  get remoteFamily(): string | undefined {
    return this.#sock.remoteFamily;
  }
  get localAddress(): string | undefined {
    return this.#sock.localAddress;
  }
  get localPort(): number | undefined {
    return this.#sock.localPort;
  }
  setNoDelay(noDelay?: boolean): this {
    this.#sock.setNoDelay(noDelay);
    return this;
  }
  // node:http2's client session refs and unrefs its socket as streams come and go.
  ref(): this {
    this.#sock.ref();
    return this;
  }
  unref(): this {
    this.#sock.unref();
    return this;
  }
}
