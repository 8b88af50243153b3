// The byte-level HTTP seam. Two implementations: `fetch` with the operator's
// CA (CA-only mode) and an HTTP/1.1 client over verified node:tls sockets
// (any mode with a pinned fingerprint; see tls.ts). The API layer above only
// sees RawResponse.

import { TlsTrustError, TransportError } from "./errors.ts";

export interface RawRequest {
  method: "GET" | "POST" | "PUT" | "DELETE";
  url: URL;
  headers: Record<string, string>;
  body?: Uint8Array<ArrayBuffer>;
}

export interface RawResponse {
  status: number;
  /** The reason phrase when the transport can read it ("" over fetch, which cannot). */
  reason: string;
  body: Uint8Array;
}

export interface Transport {
  readonly kind: "fetch" | "pinned";
  send(req: RawRequest, signal: AbortSignal): Promise<RawResponse>;
  close(): void;
}

/** Error texts of rustls/hyper that mean the peer was not trusted. */
const TRUST_FAILURE_RE = /certificate|UnknownIssuer|NotValidForName|BadSignature|Expired/i;

/** CA-only mode: native fetch; rustls verifies chain and hostname before any byte is sent. */
export function fetchTransport(caPem: string): Transport {
  const client = Deno.createHttpClient({ caCerts: [caPem] });
  return {
    kind: "fetch",
    async send(req, signal) {
      let res: Response;
      try {
        res = await fetch(req.url, {
          method: req.method,
          headers: req.headers,
          body: req.body,
          signal,
          client,
          redirect: "manual",
        });
      } catch (err) {
        if (signal.aborted) throw signal.reason ?? err;
        // The cause chain holds the useful text (e.g. "invalid peer certificate: UnknownIssuer").
        const text = describeFetchError(err);
        if (TRUST_FAILURE_RE.test(text)) {
          throw new TlsTrustError(`TLS verification of ${req.url.host} failed: ${text}`);
        }
        throw new TransportError(`connection to ${req.url.host} failed: ${text}`);
      }
      const body = new Uint8Array(await res.arrayBuffer());
      return { status: res.status, reason: "", body };
    },
    close() {
      client.close();
    },
  };
}

function describeFetchError(err: unknown): string {
  const parts: string[] = [];
  let e: unknown = err;
  for (let i = 0; i < 4 && e instanceof Error; i++) {
    parts.push(e.message);
    e = e.cause;
  }
  // fetch's outer message is just "fetch failed"; the innermost is the informative one.
  return parts.filter((p) => p !== "fetch failed").at(-1) ?? String(err);
}
