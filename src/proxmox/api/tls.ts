// TLS trust for the Proxmox API: every connection is a node:tls socket that
// is verified here before a single application byte is written.
//
// Why not fetch: Deno's HTTP client trusts the configured CA *in addition to*
// the runtime's roots (Mozilla's, DENO_CERT, DENO_TLS_CA_STORE=system) and
// follows HTTPS_PROXY/HTTP_PROXY, and it offers no hook between handshake and
// first request byte for a pin. node:tls with `ca` trusts exactly the given
// certificates and never consults proxy variables (docs/security.md).
//
// Checks: with a CA, chain and host name (or IP) must verify against that CA
// only; with a pin, the leaf's SHA-256 must equal it; with both, both. A
// socket that fails is destroyed unwritten, so no unverified peer ever sees
// the Authorization header.

import tls from "node:tls";
import { TlsTrustError, TransportError } from "./errors.ts";

export interface TrustMaterial {
  caPem: string | null;
  /** Upper-case `AB:CD:…` SHA-256, as src/config/proxmox.ts normalised it. */
  fingerprint: string | null;
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
  const pin = trust.fingerprint;
  const host = url.hostname.replace(/^\[|\]$/g, "");
  const port = Number(url.port || 443);
  const isIp = /^[0-9.]+$/.test(host) || host.includes(":");
  const where = `${url.hostname}:${port}`;
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    // Without either, nothing below would check the peer: there is no unverified mode.
    if (trust.caPem === null && pin === null) {
      return reject(new TlsTrustError("no TLS trust material (a CA or a pinned fingerprint)"));
    }
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
