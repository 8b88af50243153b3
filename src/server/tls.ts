// gRPC listener credentials. grpc-js's createSsl cannot set a minimum TLS
// version, but ServerCredentials' constructor takes the options handed to
// http2.createSecureServer, which do: so a small subclass carries
// minVersion TLSv1.3 (measured under Deno: a TLS 1.2-only client gets a
// protocol_version alert). http2's secure server negotiates ALPN h2 itself.

import * as grpc from "@grpc/grpc-js";
import { Buffer } from "node:buffer";
import type { TlsConfig } from "../config/types.ts";

export type Security = "insecure" | "TLS" | "mTLS";

class Tls13Credentials extends grpc.ServerCredentials {
  constructor(tls: TlsConfig) {
    const mtls = tls.caPem !== null;
    super({
      minVersion: "TLSv1.3",
      ALPNProtocols: ["h2"],
      // mTLS: no verified client certificate, no connection (before any handler).
      requestCert: mtls,
      rejectUnauthorized: mtls,
    }, {
      // grpc-js and node:tls want Buffers; a Uint8Array or string is refused in places.
      ca: mtls ? [Buffer.from(tls.caPem!)] : undefined,
      cert: [Buffer.from(tls.certPem)],
      key: [Buffer.from(tls.keyPem)],
    });
  }

  _equals(other: grpc.ServerCredentials): boolean {
    return other === this;
  }
}

export function serverCredentials(
  tls: TlsConfig | null,
): { credentials: grpc.ServerCredentials; security: Security } {
  if (tls === null) {
    return { credentials: grpc.ServerCredentials.createInsecure(), security: "insecure" };
  }
  return { credentials: new Tls13Credentials(tls), security: tls.caPem === null ? "TLS" : "mTLS" };
}
