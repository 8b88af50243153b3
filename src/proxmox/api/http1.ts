// HTTP/1.1 on a socket we verified ourselves (see tls.ts): the request bytes,
// and an incremental response parser that knows where a response ends, so a
// kept-alive connection can carry the next request. Only what pve-http-server
// sends is needed: Content-Length or chunked bodies, `Connection: close`.

import { Buffer } from "node:buffer";
import { TransportError } from "./errors.ts";

export interface RawRequest {
  method: "GET" | "POST" | "PUT" | "DELETE";
  url: URL;
  headers: Record<string, string>;
  body?: Uint8Array<ArrayBuffer>;
}

export interface RawResponse {
  status: number;
  /** The reason phrase (PVE puts its error text there). */
  reason: string;
  body: Uint8Array;
}

/** The request head (+ body) as written to the wire. */
export function encodeRequest(req: RawRequest): Uint8Array {
  const lines = [`${req.method} ${req.url.pathname}${req.url.search} HTTP/1.1`];
  lines.push(`Host: ${req.url.host}`);
  for (const [k, v] of Object.entries(req.headers)) lines.push(`${k}: ${v}`);
  if (req.body !== undefined) lines.push(`Content-Length: ${req.body.length}`);
  const head = new TextEncoder().encode(lines.join("\r\n") + "\r\n\r\n");
  if (req.body === undefined || req.body.length === 0) return head;
  return Buffer.concat([head, req.body]);
}

function indexOfCrlf(buf: Uint8Array, from: number, double: boolean): number {
  const need = double ? 4 : 2;
  for (let i = from; i + need <= buf.length; i++) {
    if (buf[i] !== 13 || buf[i + 1] !== 10) continue;
    if (!double || (buf[i + 2] === 13 && buf[i + 3] === 10)) return i;
  }
  return -1;
}

type Framing =
  | { kind: "length"; remaining: number }
  | { kind: "chunked" }
  | { kind: "eof" };

/**
 * Feed it the bytes of one response as they arrive; `done` flips once the
 * response is complete (or, for a body framed by EOF, when `end()` is called).
 */
export class ResponseParser {
  #buf: Uint8Array = new Uint8Array(0);
  #status = 0;
  #reason = "";
  #framing: Framing | null = null;
  #body: Uint8Array[] = [];
  /** In chunked mode: bytes left in the current chunk (+2 for its CRLF), or null between chunks. */
  #chunkLeft: number | null = null;
  #trailers = false;
  #keepAlive = false;
  done = false;
  /** Bytes arrived at all (a reused connection that closes before any is "stale"). */
  sawBytes = false;

  /** Consume bytes; throws TransportError on a malformed response. */
  feed(chunk: Uint8Array): void {
    if (chunk.length > 0) this.sawBytes = true;
    if (this.done) {
      // Bytes after a complete response: the connection is not reusable.
      if (chunk.length > 0) this.#keepAlive = false;
      return;
    }
    this.#buf = this.#buf.length === 0 ? chunk : Buffer.concat([this.#buf, chunk]);
    while (!this.done) {
      const f = this.#framing;
      if (f === null) {
        if (!this.#readHead()) return;
      } else if (f.kind === "length") {
        this.#readLength(f);
        if (!this.done) return;
      } else if (f.kind === "chunked") {
        if (!this.#readChunk()) return;
      } else {
        this.#body.push(this.#buf);
        this.#buf = new Uint8Array(0);
        return;
      }
    }
    if (this.#buf.length > 0) this.#keepAlive = false;
  }

  /** The peer closed the connection. Completes an EOF-framed body, else is an error. */
  end(): void {
    if (this.done) return;
    if (this.#framing?.kind === "eof") {
      this.done = true;
      return;
    }
    throw new TransportError(
      this.#framing === null
        ? "connection closed before a complete HTTP response"
        : "connection closed mid-response",
    );
  }

  /** Whether the connection may carry another request after this response. */
  get keepAlive(): boolean {
    return this.done && this.#keepAlive;
  }

  response(): RawResponse {
    return { status: this.#status, reason: this.#reason, body: Buffer.concat(this.#body) };
  }

  #readHead(): boolean {
    const end = indexOfCrlf(this.#buf, 0, true);
    if (end < 0) {
      if (this.#buf.length > 64 * 1024) throw new TransportError("HTTP response head too large");
      return false;
    }
    const lines = new TextDecoder().decode(this.#buf.subarray(0, end)).split("\r\n");
    this.#buf = this.#buf.subarray(end + 4);
    const m = /^HTTP\/1\.([01]) (\d{3})(?: (.*))?$/.exec(lines[0]);
    if (!m) throw new TransportError("malformed HTTP response");
    const headers = new Map<string, string>();
    for (const l of lines.slice(1)) {
      const i = l.indexOf(":");
      if (i > 0) headers.set(l.slice(0, i).trim().toLowerCase(), l.slice(i + 1).trim());
    }
    const status = Number(m[2]);
    // An interim 1xx answer is followed by the real one.
    if (status >= 100 && status < 200) return true;
    this.#status = status;
    this.#reason = m[3] ?? "";
    const conn = (headers.get("connection") ?? "").toLowerCase();
    this.#keepAlive = m[1] === "1" ? !/\bclose\b/.test(conn) : /\bkeep-alive\b/.test(conn);
    const te = headers.get("transfer-encoding");
    const len = headers.get("content-length");
    if (te !== undefined && /chunked/i.test(te)) this.#framing = { kind: "chunked" };
    else if (len !== undefined) {
      const n = Number(len);
      if (!Number.isSafeInteger(n) || n < 0) throw new TransportError("bad Content-Length");
      this.#framing = { kind: "length", remaining: n };
    } else if (status === 204 || status === 304) this.#framing = { kind: "length", remaining: 0 };
    else {
      this.#framing = { kind: "eof" };
      this.#keepAlive = false;
    }
    if (this.#framing.kind === "length" && this.#framing.remaining === 0) this.done = true;
    return true;
  }

  #readLength(f: { remaining: number }): void {
    const take = Math.min(f.remaining, this.#buf.length);
    if (take > 0) this.#body.push(this.#buf.subarray(0, take));
    this.#buf = this.#buf.subarray(take);
    f.remaining -= take;
    if (f.remaining === 0) this.done = true;
  }

  /** One step of chunked decoding; false when more bytes are needed. */
  #readChunk(): boolean {
    if (this.#trailers) {
      // Trailer lines until an empty one.
      const eol = indexOfCrlf(this.#buf, 0, false);
      if (eol < 0) return false;
      this.#buf = this.#buf.subarray(eol + 2);
      if (eol === 0) this.done = true;
      return true;
    }
    if (this.#chunkLeft === null) {
      const eol = indexOfCrlf(this.#buf, 0, false);
      if (eol < 0) return false;
      const size = parseInt(
        new TextDecoder().decode(this.#buf.subarray(0, eol)).split(";")[0].trim(),
        16,
      );
      if (!Number.isFinite(size) || size < 0) {
        throw new TransportError("malformed chunked response");
      }
      this.#buf = this.#buf.subarray(eol + 2);
      if (size === 0) this.#trailers = true;
      else this.#chunkLeft = size + 2;
      return true;
    }
    if (this.#buf.length === 0) return false;
    const dataLeft = this.#chunkLeft - 2;
    const take = Math.min(this.#chunkLeft, this.#buf.length);
    if (dataLeft > 0) this.#body.push(this.#buf.subarray(0, Math.min(take, dataLeft)));
    this.#buf = this.#buf.subarray(take);
    this.#chunkLeft -= take;
    if (this.#chunkLeft === 0) this.#chunkLeft = null;
    return true;
  }
}
