// Prometheus metrics on a registry of our own: the global prom-client registry
// is shared by every library in the process, and tests run several providers
// in one process, so nothing here ever touches it.

import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { registerProcessMetrics } from "./process_metrics.ts";
import { buildInfo } from "../version.ts";

/** The Proxmox operations the real backend reports (docs/observability.md#provider-metrics). */
export const API_OPS = [
  "CloneVM",
  "DeleteVM",
  "DescribeManaged",
  "InspectVM",
  "EnsureRunning",
  "Configure",
  "Drain",
] as const;

export type ApiOutcome = "ok" | "error";

/** FAILED machines with a known VM (their host is shown) and without one. */
export interface FailedCounts {
  withHost: number;
  withoutHost: number;
}
export type ReconcileOutcome = "ok" | "error";

export interface Metrics {
  readonly registry: Registry;
  /** One Proxmox API operation finished. */
  apiCall(op: string, outcome: ApiOutcome, seconds: number): void;
  /** One gRPC call finished; `code` is the gRPC code name (OK, NOT_FOUND, …). */
  grpcRequest(method: string, code: string, seconds: number): void;
  /** A handler or a stray promise threw something unexpected. */
  panic(): void;
  reconcile(outcome: ReconcileOutcome): void;
  /** A volume a destroy left behind could not be freed. */
  leakedVolume(): void;
  /** An operator's `machines recover` that was applied (not a dry run) ended. */
  recovery(action: "destroy" | "adopt", outcome: "ok" | "refused" | "error"): void;
  /** Where the FAILED machines gauge reads its counts from at each scrape. */
  watchFailed(read: () => FailedCounts): void;
  /** The exposition text and its content type, for /metrics. */
  scrape(): Promise<{ body: string; contentType: string }>;
}

const PREFIX = "bigfleet_proxmox_";
// Proxmox calls range from milliseconds (status reads) to minutes (clones).
const API_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
// Acks are fast; List of a big fleet and durable writes sit in the middle.
const GRPC_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export function createMetrics(): Metrics {
  const registry = new Registry();
  const registers = [registry];

  const apiCalls = new Counter({
    name: `${PREFIX}api_calls_total`,
    help: "Proxmox API operations by operation and outcome.",
    labelNames: ["op", "outcome"] as const,
    registers,
  });
  const apiDuration = new Histogram({
    name: `${PREFIX}api_duration_seconds`,
    help: "Duration of Proxmox API operations.",
    labelNames: ["op"] as const,
    buckets: API_BUCKETS,
    registers,
  });
  const grpcRequests = new Counter({
    name: `${PREFIX}grpc_requests_total`,
    help: "CapacityProvider RPCs by method and gRPC status code name.",
    labelNames: ["method", "code"] as const,
    registers,
  });
  const grpcDuration = new Histogram({
    name: `${PREFIX}grpc_request_duration_seconds`,
    help: "Duration of CapacityProvider RPCs.",
    labelNames: ["method"] as const,
    buckets: GRPC_BUCKETS,
    registers,
  });
  const panics = new Counter({
    name: `${PREFIX}panics_total`,
    help: "Unexpected exceptions caught in handlers or process-wide.",
    registers,
  });
  const reconciles = new Counter({
    name: `${PREFIX}reconcile_total`,
    help: "Background reconcile passes by outcome.",
    labelNames: ["outcome"] as const,
    registers,
  });
  const leakedVolumes = new Counter({
    name: `${PREFIX}leaked_volumes_total`,
    help: "Disks a VM destroy left behind that the provider could not free (each is logged).",
    registers,
  });

  const recoveries = new Counter({
    name: `${PREFIX}recoveries_total`,
    help: "Operator recoveries of FAILED machines (machines recover --yes) by action and outcome.",
    labelNames: ["action", "outcome"] as const,
    registers,
  });
  for (const action of ["destroy", "adopt"]) {
    for (const outcome of ["ok", "refused", "error"]) recoveries.labels(action, outcome).inc(0);
  }

  let readFailed: (() => FailedCounts) | null = null;
  const failed = new Gauge({
    name: `${PREFIX}failed_machines`,
    help: "FAILED machines by whether their VM is known (host=known: shown on the machine) " +
      "or not; each needs an operator (docs/troubleshooting.md#machines-failed).",
    labelNames: ["host"] as const,
    registers,
    collect() {
      if (readFailed === null) return;
      const c = readFailed();
      failed.labels("known").set(c.withHost);
      failed.labels("unknown").set(c.withoutHost);
    },
  });

  // Known series start at zero so rate() and absent() alerts work from boot.
  for (const host of ["known", "unknown"]) failed.labels(host).set(0);
  for (const op of API_OPS) {
    for (const outcome of ["ok", "error"]) apiCalls.labels(op, outcome).inc(0);
    apiDuration.zero({ op });
  }
  for (const outcome of ["ok", "error"]) reconciles.labels(outcome).inc(0);

  // Constant 1; the labels say which build is running (docs/observability.md).
  const info = buildInfo();
  new Gauge({
    name: `${PREFIX}build_info`,
    help: "Build of the running provider: version, commit, Deno, V8 and TypeScript versions.",
    labelNames: ["version", "commit", "deno", "v8", "typescript"] as const,
    registers,
  }).labels(info.version, info.commit, info.deno, info.v8, info.typescript).set(1);

  registerProcessMetrics(registry);

  return {
    registry,
    apiCall(op, outcome, seconds) {
      apiCalls.labels(op, outcome).inc();
      apiDuration.labels(op).observe(seconds);
    },
    grpcRequest(method, code, seconds) {
      grpcRequests.labels(method, code).inc();
      grpcDuration.labels(method).observe(seconds);
    },
    panic: () => panics.inc(),
    reconcile: (outcome) => reconciles.labels(outcome).inc(),
    leakedVolume: () => leakedVolumes.inc(),
    recovery: (action, outcome) => recoveries.labels(action, outcome).inc(),
    watchFailed(read) {
      readFailed = read;
    },
    async scrape() {
      return { body: await registry.metrics(), contentType: registry.contentType };
    },
  };
}
