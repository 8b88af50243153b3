// The connection step of preflight: the API reachable and its certificate
// trusted (no request is sent before it verifies, so a token never reaches
// an impostor), then the token accepted. When it fails, the later checks are
// listed as not run, with why.

import type { ProxmoxConfig } from "../../config/types.ts";
import type { ApiClient } from "../api/client.ts";
import { apiClientFor } from "../api/connect.ts";
import { ProxmoxApiError, TlsTrustError } from "../api/errors.ts";
import { probeTrust } from "../api/tls.ts";
import type { Timing } from "../timing.ts";
import { type CheckResult, errText, failed, pass, skipped } from "./result.ts";

/** Checks after the connection, in the order they are printed. */
const LATER_CHECKS = ["node", "pool", "privileges", "tags", "template", "storage", "hooks"];

const TRUST_FIX = "--proxmox-ca-file must hold the CA that signed the API's certificate " +
  "(/etc/pve/pve-root-ca.pem for the certificate Proxmox made itself; a custom or ACME one, " +
  "/etc/pve/local/pveproxy-ssl.pem, has its own CA), or pin the certificate the node serves " +
  "with --proxmox-tls-fingerprint (openssl x509 -in /etc/pve/local/pveproxy-ssl.pem, or " +
  "pve-ssl.pem when there is none, -noout -fingerprint -sha256); " +
  "docs/credentials.md#tls-trust-for-the-proxmox-api";
const REACH_FIX = "check --proxmox-api-url (https://HOST:8006/api2/json), that HOST resolves, " +
  "and that this host may reach the port (firewalls, Kubernetes NetworkPolicies)";
const TOKEN_FIX = "check --proxmox-token-id and the secret in --proxmox-token-file (as " +
  "setup-token.sh printed them); a rotated or expired token needs its new secret " +
  "(docs/credentials.md#rotating-the-token)";

/** A client that only reads: preflight never creates, changes or deletes anything. */
function readOnly(api: ApiClient): ApiClient {
  const refuse = (method: string) => (path: string) =>
    Promise.reject(new Error(`preflight never sends ${method} ${path}`));
  return {
    get: (path, query, signal, opts) => api.get(path, query, signal, opts),
    post: refuse("POST"),
    put: refuse("PUT"),
    del: refuse("DELETE"),
    tokens: api.tokens,
    close: () => api.close(),
  };
}

function notRun(checks: readonly string[], why: string): CheckResult[] {
  return checks.map((c) => skipped(c, "", `not checked: ${why}`, null));
}

export interface Connection {
  results: CheckResult[];
  api: ApiClient | null;
  version: string | null;
}

/** API reachable and trusted (no request before the certificate verifies), then the token. */
export async function connect(
  px: ProxmoxConfig,
  timing: Timing,
  signal: AbortSignal,
): Promise<Connection> {
  const url = new URL(px.apiUrl);
  const trustedBy = [
    px.caPem !== null ? "--proxmox-ca-file" : "",
    px.fingerprint !== null ? "the pinned --proxmox-tls-fingerprint" : "",
  ].filter((x) => x !== "").join(" and ");
  const stop = (first: CheckResult[], why: string): Connection => ({
    results: [...first, ...notRun(LATER_CHECKS, why)],
    api: null,
    version: null,
  });
  try {
    const probe = AbortSignal.any([signal, AbortSignal.timeout(timing.probeTimeoutMs)]);
    await probeTrust(url, { caPem: px.caPem, fingerprint: px.fingerprint }, probe);
  } catch (err) {
    const token = skipped("token", px.tokenId, "not checked: nothing was sent to the API", null);
    if (err instanceof TlsTrustError) {
      return stop([
        failed(
          "api",
          px.apiUrl,
          `${errText(err)}; nothing was sent, so the token never left this host`,
          TRUST_FIX,
        ),
        token,
      ], "the API's certificate is not trusted");
    }
    return stop(
      [failed("api", px.apiUrl, `cannot connect: ${errText(err)}`, REACH_FIX), token],
      "the API cannot be reached",
    );
  }
  const api = readOnly(apiClientFor(px, timing));
  let answer: unknown;
  try {
    answer = await api.get("/version", undefined, signal);
  } catch (err) {
    api.close();
    const reached = pass(
      "api",
      px.apiUrl,
      `reachable; its certificate verifies against ${trustedBy}`,
    );
    if (err instanceof ProxmoxApiError && err.status === 401) {
      return stop(
        [reached, failed("token", px.tokenId, `refused by the API: ${errText(err)}`, TOKEN_FIX)],
        "the token is not accepted",
      );
    }
    return stop([
      failed(
        "api",
        px.apiUrl,
        `the certificate verifies, but GET /version failed: ${errText(err)}`,
        "--proxmox-api-url must be the API's base URL, https://HOST:8006/api2/json",
      ),
      skipped("token", px.tokenId, "not checked: the API did not answer", null),
    ], "the API did not answer");
  }
  const version = String((answer as Record<string, unknown> | null)?.version ?? "unknown");
  return {
    results: [
      pass("api", px.apiUrl, `reachable; its certificate verifies against ${trustedBy}`),
      pass("token", px.tokenId, `accepted (Proxmox VE ${version})`),
    ],
    api,
    version,
  };
}
