// The Prometheus exposition of the provider's metrics, on a registry of our
// own: the global prom-client registry is shared by every library in the
// process, and tests run several providers in one process, so nothing here
// ever touches it. Loaded by metrics.ts once the gRPC port is open (prom-client
// takes ~30 ms to evaluate); what was counted before is replayed into it.

import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { registerProcessMetrics } from "./process_metrics.ts";
import { registerRoomMetrics } from "./room_metrics.ts";
import { buildInfo } from "../version.ts";
import { EDGES, type OpKind, STATE_NAMES } from "../kit/model.ts";
import type { TransitionEvent } from "../kit/transitions.ts";
import type { ZoneRoom } from "../kit/backend.ts";
import { API_OPS, type FailedCounts, type MetricsSink, PREFIX, STATE_LABELS } from "./metrics.ts";

// Proxmox calls range from milliseconds (status reads) to minutes (clones).
const API_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
// Acks are fast; List of a big fleet and durable writes sit in the middle.
const GRPC_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** What the facade reads at each scrape: FAILED counts, room per zone, machines by zone and state. */
export interface Readers {
  failed(): FailedCounts | null;
  room(): ZoneRoom[];
  census(): ReadonlyMap<string, Int32Array>;
}

export function createPromSink(read: Readers): MetricsSink {
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

  const failed = new Gauge({
    name: `${PREFIX}failed_machines`,
    help: "FAILED machines by whether their VM is known (host=known: shown on the machine) " +
      "or not; each needs an operator (docs/troubleshooting.md#machines-failed).",
    labelNames: ["host"] as const,
    registers,
    collect() {
      const c = read.failed();
      if (c === null) return;
      failed.labels("known").set(c.withHost);
      failed.labels("unknown").set(c.withoutHost);
    },
  });

  registerRoomMetrics(registers, read.room);

  // Machines by state and zone, counted by the facade (metrics.ts) as records change.
  new Gauge({
    name: `${PREFIX}machines`,
    help: "Machines in the inventory by state and zone.",
    labelNames: ["state", "zone"] as const,
    registers,
    collect() {
      for (const [zone, perState] of read.census()) {
        for (let st = 1; st < STATE_LABELS.length; st++) {
          this.labels(STATE_LABELS[st], zone).set(perState[st]);
        }
      }
    },
  });
  // When the oldest transition still running in each transitional state
  // started: changes only when a transition starts or ends; Prometheus takes
  // the age (time() - it) and compares it with the timeout below.
  const oldestStart = new Gauge({
    name: `${PREFIX}transition_oldest_start_seconds`,
    help: "Unix time the oldest transition still running in this state started; 0 when none runs.",
    labelNames: ["state"] as const,
    registers,
  });
  const timeout = new Gauge({
    name: `${PREFIX}transition_timeout_seconds`,
    help: "Timeout of the transitions shown in this state; the kit fails them at this age.",
    labelNames: ["state"] as const,
    registers,
  });
  for (const edge of Object.values(EDGES)) oldestStart.labels(STATE_NAMES[edge.via]).set(0);

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
    transition(e: TransitionEvent) {
      oldestStart.labels(STATE_NAMES[EDGES[e.kind].via]).set((e.oldestRunning ?? 0) / 1000);
    },
    transitionTimeouts(ms) {
      for (const [kind, edge] of Object.entries(EDGES) as [OpKind, typeof EDGES[OpKind]][]) {
        timeout.labels(STATE_NAMES[edge.via]).set(ms[kind] / 1000);
      }
    },
    async scrape() {
      return { body: await registry.metrics(), contentType: registry.contentType };
    },
  };
}
