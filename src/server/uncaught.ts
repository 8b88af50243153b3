// Process-wide last line of defence: an exception or rejection nobody caught
// (a stray promise in a library, a timer callback) is counted and logged
// instead of ending the process, so one bad request never takes the provider
// down. Handler exceptions are caught earlier and answered INTERNAL.

import { getLogger } from "@logtape/logtape";
import type { Metrics } from "./metrics.ts";
import { describeError } from "./rpc_observer.ts";

const log = getLogger(["bigfleet", "panic"]);

/** Installs the handlers; returns a function that removes them. */
export function catchUncaught(metrics: Metrics): () => void {
  const onRejection = (e: PromiseRejectionEvent) => {
    e.preventDefault();
    metrics.panic();
    log.error("unhandled rejection: {error}", { error: describeError(e.reason) });
  };
  const onError = (e: ErrorEvent) => {
    e.preventDefault();
    metrics.panic();
    log.error("uncaught exception: {error}", { error: describeError(e.error ?? e.message) });
  };
  globalThis.addEventListener("unhandledrejection", onRejection);
  globalThis.addEventListener("error", onError);
  return () => {
    globalThis.removeEventListener("unhandledrejection", onRejection);
    globalThis.removeEventListener("error", onError);
  };
}
