// Client-side transport for talking to a provider: plaintext h2c by default
// (what the provider serves without --tls-*), TLS verified by a CA bundle or
// the system trust store, mTLS with a client certificate. The flag names
// mirror the server's (--tls-ca, --tls-cert, --tls-key; docs/cli.md).

import * as grpc from "@grpc/grpc-js";
import { flagError } from "../config/errors.ts";
import { type ReadFile, readFromDisk, readPem } from "../config/files.ts";
import { hasCertificate, hasPrivateKey } from "../config/pem.ts";
import { withGoawayFilter } from "./goaway_credentials.ts";
import { clientTls } from "./tls_credentials.ts";

export interface ClientTlsFlags {
  /** TLS with the system trust store (implied by any of the files). */
  tls: boolean;
  caFile: string;
  certFile: string;
  keyFile: string;
  /** Name to verify in the server certificate instead of the target's host. */
  serverName: string;
}

export type ClientSecurity = "plaintext" | "TLS" | "mTLS";

export interface Channel {
  credentials: grpc.ChannelCredentials;
  options: grpc.ChannelOptions;
  security: ClientSecurity;
}

/** Credentials and channel options for the flags; a bad flag or file is a ConfigError. */
export async function clientChannel(
  f: ClientTlsFlags,
  readFile: ReadFile = readFromDisk,
): Promise<Channel> {
  if (f.certFile !== "" && f.keyFile === "") {
    throw flagError("tls-cert", "given without --tls-key; both are needed for mTLS");
  }
  if (f.keyFile !== "" && f.certFile === "") {
    throw flagError("tls-key", "given without --tls-cert; both are needed for mTLS");
  }
  const tls = f.tls || f.caFile !== "" || f.certFile !== "";
  if (!tls) {
    if (f.serverName !== "") throw flagError("tls-server-name", "needs TLS (--tls or --tls-ca)");
    return {
      credentials: withGoawayFilter(grpc.credentials.createInsecure()),
      options: {},
      security: "plaintext",
    };
  }
  const ca = f.caFile === ""
    ? null
    : await readPem("tls-ca", f.caFile, readFile, "CERTIFICATE", hasCertificate);
  const cert = f.certFile === ""
    ? null
    : await readPem("tls-cert", f.certFile, readFile, "CERTIFICATE", hasCertificate);
  const key = f.keyFile === ""
    ? null
    : await readPem("tls-key", f.keyFile, readFile, "PRIVATE KEY", hasPrivateKey);
  // The authority (:authority, what the server sees as the host) follows the name checked.
  const options: grpc.ChannelOptions = f.serverName === ""
    ? {}
    : { "grpc.default_authority": f.serverName };
  return {
    credentials: withGoawayFilter(clientTls({ ca, key, cert, serverName: f.serverName })),
    options,
    security: cert === null ? "TLS" : "mTLS",
  };
}
