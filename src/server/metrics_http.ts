// The operations listener on --metrics-addr: /metrics, /healthz, /readyz.
// It starts before anything slow so liveness answers during boot; readiness
// follows a flag the app flips once gRPC serves and drops first on shutdown.

import { getLogger } from "@logtape/logtape";
import type { ListenAddr } from "../config/types.ts";
import type { Metrics } from "./metrics.ts";

/** Whether the provider is serving; read on every /readyz. */
export interface Readiness {
  ready: boolean;
}

export interface OpsServer {
  readonly port: number;
  close(): Promise<void>;
}

const log = getLogger(["bigfleet", "http"]);
const TEXT = "text/plain; charset=utf-8";

function text(body: string, status = 200): Response {
  return new Response(body, { status, headers: { "content-type": TEXT } });
}

export function handleOpsRequest(
  req: Request,
  metrics: Metrics,
  readiness: Readiness,
): Response | Promise<Response> {
  const { pathname } = new URL(req.url);
  switch (pathname) {
    case "/healthz":
      return text("ok");
    case "/readyz":
      return readiness.ready ? text("ready") : text("not ready", 503);
    case "/metrics":
      return metrics.scrape().then(({ body, contentType }) =>
        new Response(body, { headers: { "content-type": contentType } })
      );
    default:
      return text("not found", 404);
  }
}

/**
 * Listen on addr. A listen failure is logged and yields null: several
 * providers on one host (the certification runner) share the default :9090,
 * and metrics must never keep the provider itself from serving.
 */
export function startOpsServer(
  addr: ListenAddr,
  metrics: Metrics,
  readiness: Readiness,
): OpsServer | null {
  let server: Deno.HttpServer<Deno.NetAddr>;
  try {
    server = Deno.serve({
      hostname: addr.host === "" ? "0.0.0.0" : addr.host,
      port: addr.port,
      onListen: () => {},
      onError: (e) => {
        log.warn("metrics request failed: {error}", { error: String(e) });
        return text("internal error", 500);
      },
    }, (req) => handleOpsRequest(req, metrics, readiness));
  } catch (e) {
    const reason = e instanceof Deno.errors.AddrInUse ? "address already in use" : String(e);
    log.warn("metrics listener disabled: cannot listen on {addr}: {reason}", {
      addr: addr.raw,
      reason,
    });
    return null;
  }
  return {
    port: server.addr.port,
    close: () => server.shutdown(),
  };
}
