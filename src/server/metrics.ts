// The provider's metrics as the rest of the code sees them. Counting is plain
// data here; the Prometheus exposition (prom-client, metrics_prom.ts) is
// loaded only once the gRPC port is open (`load()`, called by src/app.ts; a
// scrape loads it too), because evaluating prom-client costs a fresh start
// ~30 ms before its first accept (bench/RESULTS.md). Calls made before it is
// loaded are kept, in order, and replayed into it: a boot makes a few
// (Proxmox calls of the first describe, a panic), never one per machine.

import { STATE_NAMES } from "../kit/model.ts";
import type { OpKind } from "../kit/model.ts";
import type { KitObserver, TransitionEvent } from "../kit/transitions.ts";
import type { ZoneRoom } from "../kit/backend.ts";

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

export const PREFIX = "bigfleet_proxmox_";
/** State label values by state number (the wire enum's names, as `machines list` shows them). */
export const STATE_LABELS: readonly string[] = Object.values(STATE_NAMES);

/** What the exposition records: every call of Metrics that is not plain counting here. */
export interface MetricsSink {
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
  /** A transition started or ended: the oldest one still running per state. */
  transition(event: TransitionEvent): void;
  /** The transition timeouts in ms, exported for the stuck-transition alert. */
  transitionTimeouts(ms: Readonly<Record<OpKind, number>>): void;
  /** The exposition text and its content type, for /metrics. */
  scrape(): Promise<{ body: string; contentType: string }>;
}

export interface Metrics extends Omit<MetricsSink, "transition"> {
  /** Where the FAILED machines gauge reads its counts from at each scrape. */
  watchFailed(read: () => FailedCounts): void;
  /** Where the room gauges read each zone's room from at each scrape (a backend that counts it). */
  watchRoom(read: () => ZoneRoom[]): void;
  /** The kit's observer: machines by state and zone, the oldest running transition per state. */
  readonly fleet: KitObserver;
  /** Loads the exposition and replays what was recorded before; once, however often called. */
  load(): Promise<void>;
}

export function createMetrics(): Metrics {
  let readFailed: (() => FailedCounts) | null = null;
  let readRoom: (() => ZoneRoom[]) | null = null;
  // Machines by state and zone: counted as records change (O(1) per change),
  // read out per scrape (states × zones series), never by walking the fleet.
  const census = new Map<string, Int32Array>();
  const count = (m: { state: number; zone: string }, by: number) => {
    let perState = census.get(m.zone);
    if (!perState) census.set(m.zone, perState = new Int32Array(STATE_LABELS.length));
    perState[m.state] += by;
  };

  let sink: MetricsSink | null = null;
  let early: ((s: MetricsSink) => void)[] = [];
  let loading: Promise<void> | null = null;
  const record = (f: (s: MetricsSink) => void) => sink ? f(sink) : void early.push(f);

  function load(): Promise<void> {
    loading ??= import("./metrics_prom.ts").then(({ createPromSink }) => {
      const s = createPromSink({
        failed: () => readFailed?.() ?? null,
        room: () => readRoom?.() ?? [],
        census: () => census,
      });
      for (const f of early) f(s);
      early = [];
      sink = s;
    });
    return loading;
  }

  return {
    apiCall: (op, outcome, seconds) => record((s) => s.apiCall(op, outcome, seconds)),
    grpcRequest: (method, code, seconds) => record((s) => s.grpcRequest(method, code, seconds)),
    panic: () => record((s) => s.panic()),
    reconcile: (outcome) => record((s) => s.reconcile(outcome)),
    leakedVolume: () => record((s) => s.leakedVolume()),
    recovery: (action, outcome) => record((s) => s.recovery(action, outcome)),
    watchFailed(read) {
      readFailed = read;
    },
    watchRoom(read) {
      readRoom = read;
    },
    fleet: {
      machineChanged(before, after) {
        if (before && after && before.state === after.state && before.zone === after.zone) return;
        if (before) count(before, -1);
        if (after) count(after, 1);
      },
      transition: (e) => record((s) => s.transition(e)),
    },
    transitionTimeouts: (ms) => record((s) => s.transitionTimeouts({ ...ms })),
    load,
    async scrape() {
      await load();
      return await sink!.scrape();
    },
  };
}
