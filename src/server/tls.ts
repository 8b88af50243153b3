// gRPC listener TLS: the node:tls server options the listener
// (src/server/listener.ts) terminates TLS with. TLS 1.3 minimum (measured
// under Deno: a TLS 1.2-only client gets a protocol_version alert), ALPN h2
// only, and under mTLS a verified client certificate before any byte reaches
// HTTP/2.

import { Buffer } from "node:buffer";
import type { TlsOptions } from "node:tls";
import type { TlsConfig } from "../config/types.ts";

export type Security = "insecure" | "TLS" | "mTLS";

export function listenerTls(tls: TlsConfig | null): { tls: TlsOptions | null; security: Security } {
  if (tls === null) return { tls: null, security: "insecure" };
  const mtls = tls.caPem !== null;
  return {
    tls: {
      minVersion: "TLSv1.3",
      ALPNProtocols: ["h2"],
      // mTLS: no verified client certificate, no connection.
      requestCert: mtls,
      rejectUnauthorized: mtls,
      // node:tls wants Buffers; a Uint8Array or string is refused in places.
      ca: mtls ? [Buffer.from(tls.caPem!)] : undefined,
      cert: [Buffer.from(tls.certPem)],
      key: [Buffer.from(tls.keyPem)],
    },
    security: mtls ? "mTLS" : "TLS",
  };
}
