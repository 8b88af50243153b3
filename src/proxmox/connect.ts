// Connecting to the Proxmox API: the https check, the up-front TLS trust
// probe, and the API client over the transport the trust material selects.

import { getLogger } from "@logtape/logtape";
import type { ProxmoxConfig } from "../config/types.ts";
import { BackendError } from "../kit/backend.ts";
import type { Timing } from "./context.ts";
import { TlsTrustError } from "./errors.ts";
import { type ApiClient, createApiClient } from "./http.ts";
import { normalizeFingerprint, probeTrust } from "./tls.ts";
import { type Transport, verifiedTransport } from "./transport.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/** The transport for the configured trust material; there is no unverified mode. */
function makeTransport(caPem: string | null, fingerprint: string | null): Transport {
  if (caPem !== null || fingerprint !== null) return verifiedTransport({ caPem, fingerprint });
  throw new BackendError(
    "proxmox: no TLS trust material (--proxmox-ca-file or --proxmox-tls-fingerprint)",
  );
}

/** An API client for `px`, after checking the server's TLS identity when it is reachable. */
export async function connectApi(px: ProxmoxConfig, timing: Timing): Promise<ApiClient> {
  const fingerprint = px.fingerprint === null ? null : normalizeFingerprint(px.fingerprint);
  const baseUrl = new URL(px.apiUrl);
  if (baseUrl.protocol !== "https:") {
    throw new BackendError("proxmox API URL must be https:// (the token is a secret)");
  }

  // Fail loudly on a wrong CA or pin before any request (and token) goes out.
  try {
    await probeTrust(
      baseUrl,
      { caPem: px.caPem, fingerprint },
      AbortSignal.timeout(timing.probeTimeoutMs),
    );
  } catch (err) {
    if (err instanceof TlsTrustError) throw err;
    // Unreachable right now is not fatal: every later connection is verified anyway.
    log.warn("could not reach the Proxmox API for a TLS check: {error}", {
      error: (err as Error).message,
    });
  }

  return apiClientFor(px, timing);
}

/**
 * An API client for `px` without the up-front probe (every connection is
 * still verified): for callers that probe on their own, like preflight.
 */
export function apiClientFor(
  px: ProxmoxConfig,
  timing: Pick<Timing, "requestTimeoutMs" | "readAttempts" | "retryBaseMs">,
): ApiClient {
  const fingerprint = px.fingerprint === null ? null : normalizeFingerprint(px.fingerprint);
  return createApiClient({
    baseUrl: px.apiUrl,
    tokenId: px.tokenId,
    tokenSecret: px.tokenSecret,
    transport: makeTransport(px.caPem, fingerprint),
    requestTimeoutMs: timing.requestTimeoutMs,
    readAttempts: timing.readAttempts,
    retryBaseMs: timing.retryBaseMs,
  });
}
