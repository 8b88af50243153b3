// TLS trust for the Proxmox API.
//
// Fingerprint pinning cannot be done with fetch: Deno's HTTP client offers no
// hook between the handshake and the first request byte, and a probe
// connection followed by fetch would leave fetch's own connection unchecked.
// So whenever a fingerprint is pinned, every request goes over its own
// node:tls socket: connect, finish the handshake, compare the leaf's SHA-256
// with the pin (and, when a CA is also given, require chain + hostname to
// verify as well), and only then write the request. A socket that fails the
// check is destroyed without a single application byte written, so no
// unverified peer ever sees the Authorization header. One request per
// connection (`Connection: close`) keeps "every connection is checked"
// trivially true and the response framing simple.

import tls from "node:tls";
import { TlsTrustError, TransportError } from "./errors.ts";
import type { RawRequest, RawResponse, Transport } from "./transport.ts";

export interface TrustMaterial {
  caPem: string | null;
  /** AB:CD:… upper-case or bare hex. */
  fingerprint: string | null;
}

/** Canonical `AB:CD:…` form, or throws when not 32 hex bytes. */
export function normalizeFingerprint(fp: string): string {
  const hex = fp.replace(/^sha256\s*[:=]?\s*/i, "").replace(/[:\s-]/g, "").toUpperCase();
  if (!/^[0-9A-F]{64}$/.test(hex)) {
    throw new TlsTrustError("TLS fingerprint must be a SHA-256 digest (64 hex digits)");
  }
  return hex.match(/../g)!.join(":");
}

const NODE_TRUST_CODES = /CERT|SIGNATURE|ISSUER|ALTNAME|SELF_SIGNED|VERIFY|EXPIRED/i;

/**
 * Open a TLS socket to the URL's host and resolve only once it is verified
 * against the trust material. Nothing is written to the socket here.
 */
export function connectVerified(
  url: URL,
  trust: TrustMaterial,
  signal: AbortSignal,
): Promise<tls.TLSSocket> {
  const pin = trust.fingerprint === null ? null : normalizeFingerprint(trust.fingerprint);
  const host = url.hostname.replace(/^\[|\]$/g, "");
  const port = Number(url.port || 443);
  const isIp = /^[0-9.]+$/.test(host) || host.includes(":");
  const where = `${url.hostname}:${port}`;
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const socket = tls.connect({
      host,
      port,
      servername: isIp ? undefined : host,
      ALPNProtocols: ["http/1.1"],
      // With a CA the chain and hostname must verify. Without one the pin is
      // the only trust anchor and is checked below before anything is sent.
      ca: trust.caPem ?? undefined,
      rejectUnauthorized: trust.caPem !== null,
    });
    const onAbort = () => {
      socket.destroy();
      reject(signal.reason);
    };
    signal.addEventListener("abort", onAbort, { once: true });
    const settle = () => signal.removeEventListener("abort", onAbort);
    socket.once("secureConnect", () => {
      settle();
      if (trust.caPem !== null && !socket.authorized) {
        socket.destroy();
        return reject(
          new TlsTrustError(
            `TLS verification of ${where} failed: ${socket.authorizationError ?? "untrusted"}`,
          ),
        );
      }
      if (pin !== null) {
        const actual = socket.getPeerCertificate()?.fingerprint256 ?? "";
        if (actual.toUpperCase() !== pin) {
          socket.destroy();
          return reject(
            new TlsTrustError(
              `TLS fingerprint mismatch for ${where}: server presented ${
                actual || "no certificate"
              }, pinned ${pin}`,
            ),
          );
        }
      }
      resolve(socket);
    });
    socket.once("error", (err: Error & { code?: string }) => {
      settle();
      socket.destroy();
      if (NODE_TRUST_CODES.test(err.code ?? "") || /certificate/i.test(err.message)) {
        reject(new TlsTrustError(`TLS verification of ${where} failed: ${err.message}`));
      } else {
        reject(new TransportError(`connection to ${where} failed: ${err.message}`));
      }
    });
  });
}

/**
 * Check the server's certificate against the trust material without sending
 * any request: used once at startup so a wrong CA or pin fails loudly.
 */
export async function probeTrust(
  url: URL,
  trust: TrustMaterial,
  signal: AbortSignal,
): Promise<void> {
  const socket = await connectVerified(url, trust, signal);
  socket.destroy();
}

const CRLF = new Uint8Array([13, 10, 13, 10]);

function indexOfSeq(hay: Uint8Array, needle: Uint8Array, from = 0): number {
  outer: for (let i = from; i <= hay.length - needle.length; i++) {
    for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}

function concat(chunks: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let o = 0;
  for (const c of chunks) {
    out.set(c, o);
    o += c.length;
  }
  return out;
}

/** Decode a `Transfer-Encoding: chunked` body (extensions and trailers ignored). */
export function decodeChunked(buf: Uint8Array): Uint8Array {
  const parts: Uint8Array[] = [];
  const dec = new TextDecoder();
  let pos = 0;
  while (pos < buf.length) {
    const eol = indexOfSeq(buf, CRLF.subarray(0, 2), pos);
    if (eol < 0) throw new TransportError("malformed chunked response");
    const size = parseInt(dec.decode(buf.subarray(pos, eol)).split(";")[0].trim(), 16);
    if (!Number.isFinite(size)) throw new TransportError("malformed chunked response");
    if (size === 0) break;
    parts.push(buf.subarray(eol + 2, eol + 2 + size));
    pos = eol + 2 + size + 2;
  }
  return concat(parts);
}

interface Head {
  status: number;
  reason: string;
  headers: Map<string, string>;
}

function parseHead(text: string): Head {
  const lines = text.split("\r\n");
  const m = /^HTTP\/1\.[01] (\d{3})(?: (.*))?$/.exec(lines[0]);
  if (!m) throw new TransportError("malformed HTTP response");
  const headers = new Map<string, string>();
  for (const l of lines.slice(1)) {
    const i = l.indexOf(":");
    if (i > 0) headers.set(l.slice(0, i).trim().toLowerCase(), l.slice(i + 1).trim());
  }
  return { status: Number(m[1]), reason: m[2] ?? "", headers };
}

/** One request on one freshly verified connection. */
async function sendOnce(
  req: RawRequest,
  trust: TrustMaterial,
  signal: AbortSignal,
): Promise<RawResponse> {
  const socket = await connectVerified(req.url, trust, signal);
  const head = [`${req.method} ${req.url.pathname}${req.url.search} HTTP/1.1`];
  head.push(`Host: ${req.url.host}`, "Connection: close");
  for (const [k, v] of Object.entries(req.headers)) head.push(`${k}: ${v}`);
  if (req.body !== undefined) head.push(`Content-Length: ${req.body.length}`);
  const headBytes = new TextEncoder().encode(head.join("\r\n") + "\r\n\r\n");

  return await new Promise<RawResponse>((resolve, reject) => {
    const chunks: Uint8Array[] = [];
    let received = 0;
    // Total bytes expected once the head is parsed and Content-Length framed; else read to EOF.
    let expected: number | null = null;
    let headSeen = false;
    let done = false;
    const finish = (err: Error | null) => {
      if (done) return;
      done = true;
      signal.removeEventListener("abort", onAbort);
      socket.destroy();
      if (err) return reject(err);
      try {
        resolve(parseResponse(concat(chunks)));
      } catch (e) {
        reject(e);
      }
    };
    const onAbort = () => finish(signal.reason ?? new DOMException("aborted", "AbortError"));
    signal.addEventListener("abort", onAbort, { once: true });
    socket.on("data", (d: Uint8Array) => {
      chunks.push(new Uint8Array(d));
      received += d.length;
      if (!headSeen) {
        const buf = concat(chunks);
        const end = indexOfSeq(buf, CRLF);
        if (end < 0) return;
        headSeen = true;
        let head: Head;
        try {
          head = parseHead(new TextDecoder().decode(buf.subarray(0, end)));
        } catch (e) {
          return finish(e as Error);
        }
        const len = head.headers.get("content-length");
        if (len !== undefined && !head.headers.has("transfer-encoding")) {
          expected = end + 4 + Number(len);
        }
      }
      if (expected !== null && received >= expected) finish(null);
    });
    socket.on("end", () => finish(null));
    socket.on("close", () => finish(null));
    socket.on("error", (e: Error) => finish(new TransportError(`request failed: ${e.message}`)));
    socket.write(req.body ? concat([headBytes, req.body]) : headBytes);
  });
}

function parseResponse(buf: Uint8Array): RawResponse {
  const end = indexOfSeq(buf, CRLF);
  if (end < 0) throw new TransportError("connection closed before a complete HTTP response");
  const head = parseHead(new TextDecoder().decode(buf.subarray(0, end)));
  let body = buf.subarray(end + 4);
  if (/chunked/i.test(head.headers.get("transfer-encoding") ?? "")) body = decodeChunked(body);
  else if (head.headers.has("content-length")) {
    const len = Number(head.headers.get("content-length"));
    if (body.length < len) throw new TransportError("connection closed mid-response");
    body = body.subarray(0, len);
  }
  return { status: head.status, reason: head.reason, body };
}

/** Pinned mode (fingerprint, optionally plus CA): every request on its own verified socket. */
export function pinnedTransport(trust: TrustMaterial): Transport {
  normalizeFingerprint(trust.fingerprint ?? "");
  return {
    kind: "pinned",
    send: (req, signal) => sendOnce(req, trust, signal),
    close() {},
  };
}
