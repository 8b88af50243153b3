// One direction of an HTTP/2 connection, filtered before the HTTP/2 stack
// sees it: every GOAWAY frame is removed and, on the client-to-server half,
// the connection preface is checked first. Why GOAWAY: Deno's node:http2
// (2.9.x) frees the nghttp2 session from inside nghttp2's own GOAWAY
// processing when the peer says goodbye, and nghttp2 then reads freed memory,
// which aborts or corrupts the process (docs/security.md#the-http2-frame-guard).
// That holds for a server reading a client's goodbye and for a client (the
// CLI) reading a server's. A client's GOAWAY only tells the server not to
// push, and this server never pushes; a server's tells the client to open no
// more streams, which its TCP close after the last call says as well. Either
// way the close that follows ends the session as usual.
//
// Bytes pass through as slices of the chunks they arrived in; only a frame
// header split across chunks is copied.

/** RFC 9113 §3.4: what every HTTP/2 client sends first. */
export const CLIENT_PREFACE = new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
const FRAME_HEADER = 9;
const GOAWAY = 0x7;

export class NotHttp2Error extends Error {
  override name = "NotHttp2Error";
}

/** What a server sends first is an ordinary SETTINGS frame: nothing to check. */
export const NO_PREFACE = new Uint8Array(0);

export class GoawayFilter {
  /** The bytes the stream must start with (CLIENT_PREFACE, or NO_PREFACE). */
  readonly #preface: Uint8Array;
  #prefaceSeen = 0;
  /** A frame header being collected across chunks. */
  readonly #header = new Uint8Array(FRAME_HEADER);
  #headerSeen = 0;
  /** Payload bytes of the current frame still to pass (or to drop). */
  #payloadLeft = 0;
  #dropping = false;
  /** GOAWAY frames removed so far. */
  goawaysDropped = 0;

  constructor(preface: Uint8Array = CLIENT_PREFACE) {
    this.#preface = preface;
  }

  /** The whole preface has arrived. */
  get prefaceDone(): boolean {
    return this.#prefaceSeen === this.#preface.length;
  }

  /** The bytes of `chunk` to forward, in order. Throws NotHttp2Error on a bad preface. */
  push(chunk: Uint8Array): Uint8Array[] {
    const out: Uint8Array[] = [];
    let i = 0;
    let runStart = 0; // start of bytes of this chunk that pass unchanged
    const flush = (end: number) => {
      if (end > runStart) out.push(chunk.subarray(runStart, end));
    };
    while (i < chunk.length) {
      if (!this.prefaceDone) {
        if (chunk[i] !== this.#preface[this.#prefaceSeen]) {
          throw new NotHttp2Error("the connection did not start with the HTTP/2 client preface");
        }
        this.#prefaceSeen++;
        i++;
      } else if (this.#payloadLeft > 0) {
        const n = Math.min(this.#payloadLeft, chunk.length - i);
        this.#payloadLeft -= n;
        i += n;
        if (this.#dropping) runStart = i;
      } else if (this.#headerSeen === 0 && chunk.length - i >= FRAME_HEADER) {
        // The common case: the header is whole in this chunk.
        const header = chunk.subarray(i, i + FRAME_HEADER);
        if (this.#startFrame(header)) {
          flush(i);
          runStart = i + FRAME_HEADER;
        }
        i += FRAME_HEADER;
        if (this.#dropping) runStart = i;
      } else {
        // Collect a header split across chunks; it is held back (and passed
        // as a copy) until its type is known.
        flush(i);
        const n = Math.min(FRAME_HEADER - this.#headerSeen, chunk.length - i);
        this.#header.set(chunk.subarray(i, i + n), this.#headerSeen);
        this.#headerSeen += n;
        i += n;
        runStart = i;
        if (this.#headerSeen === FRAME_HEADER) {
          this.#headerSeen = 0;
          if (!this.#startFrame(this.#header)) out.push(this.#header.slice());
        }
      }
    }
    flush(i);
    return out;
  }

  /** Reads a frame header; true when the frame is dropped. */
  #startFrame(h: Uint8Array): boolean {
    this.#payloadLeft = (h[0] << 16) | (h[1] << 8) | h[2];
    this.#dropping = h[3] === GOAWAY;
    if (this.#dropping) this.goawaysDropped++;
    return this.#dropping;
  }
}
