// Connecting to the Proxmox API: the up-front TLS trust probe, and the API
// client over verified connections. `px` is the validated configuration
// (src/config/proxmox.ts): https URL, token id and fingerprint are not
// checked again here.

import { getLogger } from "@logtape/logtape";
import type { ProxmoxConfig } from "../../config/types.ts";
import type { Timing } from "../timing.ts";
import { TlsTrustError } from "./errors.ts";
import { type ApiClient, createApiClient } from "./client.ts";
import { probeTrust } from "./tls.ts";
import { fileToken } from "./token_source.ts";
import { verifiedTransport } from "./transport.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/** An API client for `px`, after checking the server's TLS identity when it is reachable. */
export async function connectApi(px: ProxmoxConfig, timing: Timing): Promise<ApiClient> {
  // Fail loudly on a wrong CA or pin before any request (and token) goes out.
  try {
    await probeTrust(
      new URL(px.apiUrl),
      { caPem: px.caPem, fingerprint: px.fingerprint },
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
  return createApiClient({
    baseUrl: px.apiUrl,
    tokenId: px.tokenId,
    tokenSecret: px.tokenSecret,
    // A token file is followed as it changes: rotation without a restart.
    token: px.tokenFile === null ? undefined : fileToken({
      path: px.tokenFile,
      tokenId: px.tokenId,
      secret: px.tokenSecret,
    }),
    transport: verifiedTransport({ caPem: px.caPem, fingerprint: px.fingerprint }),
    requestTimeoutMs: timing.requestTimeoutMs,
    readAttempts: timing.readAttempts,
    retryBaseMs: timing.retryBaseMs,
    callsPerNode: px.callsPerNode,
  });
}
