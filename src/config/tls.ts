// The gRPC listener's TLS: cert + key enable TLS, adding a client CA enables
// mTLS. Half-configured setups fail at startup instead of serving plaintext.

import type { TlsConfig } from "./types.ts";
import { flagError } from "./errors.ts";
import { type ReadFile, readPem } from "./files.ts";
import { hasCertificate, hasPrivateKey } from "./pem.ts";

export interface TlsFlags {
  certFile: string;
  keyFile: string;
  caFile: string;
}

/** Load and check the TLS files; null when TLS is off. */
export async function loadTls(flags: TlsFlags, readFile: ReadFile): Promise<TlsConfig | null> {
  const { certFile, keyFile, caFile } = flags;
  if (certFile === "" && keyFile === "") {
    if (caFile !== "") {
      throw flagError("tls-ca", "needs --tls-cert and --tls-key (mTLS is on top of TLS)");
    }
    return null;
  }
  if (certFile === "") {
    throw flagError("tls-key", "given without --tls-cert; both are needed for TLS");
  }
  if (keyFile === "") {
    throw flagError("tls-cert", "given without --tls-key; both are needed for TLS");
  }
  const certPem = await readPem("tls-cert", certFile, readFile, "CERTIFICATE", hasCertificate);
  const keyPem = await readPem("tls-key", keyFile, readFile, "PRIVATE KEY", hasPrivateKey);
  const caPem = caFile === ""
    ? null
    : await readPem("tls-ca", caFile, readFile, "CERTIFICATE", hasCertificate);
  return { certPem, keyPem, caPem };
}
