// Assembles one provider from a validated Config: metrics and probes, backend,
// state store, kit, gRPC listener and the reconcile loop. main.ts adds process
// concerns (flags, signals, crash guards, exit codes); tests call startApp
// directly to inject a backend or wrap the kit.

import { getLogger } from "@logtape/logtape";
import type { Config } from "./config/types.ts";
import { createFakeBackend } from "./fake/backend.ts";
import type { Backend } from "./kit/backend.ts";
import { DEFAULT_TIMEOUTS, startKit } from "./kit/kit.ts";
import type { Kit, Timeouts } from "./kit/kit.ts";
import { openKvStore } from "./kit/kv_store.ts";
import { createMemoryStore } from "./kit/store.ts";
import type { StateStore } from "./kit/store.ts";
import { startGrpcServer } from "./server/grpc.ts";
import type { GrpcServer } from "./server/grpc.ts";
import { startOpsServer } from "./server/http.ts";
import type { Readiness } from "./server/http.ts";
import { createMetrics } from "./server/metrics.ts";
import type { Metrics } from "./server/metrics.ts";
import { createRpcObserver } from "./server/rpc_observer.ts";
import { listenerTls } from "./server/tls.ts";
import { buildInfo } from "./version.ts";

export interface AppOptions {
  /** Replaces the backend the config selects (tests inject failing or blocking ones). */
  backend?: Backend;
  /** Transition timeouts in ms; defaults: docs/design.md#transitions-and-timeouts. */
  timeouts?: Partial<Timeouts>;
  /** Metrics to record into; main.ts shares them with the crash guards. */
  metrics?: Metrics;
  /** Wraps the kit the server calls (tests inject throwing or slow kits). */
  wrapKit?: (kit: Kit) => Kit;
  /** How long stop() lets in-flight RPCs run before cutting them. */
  shutdownGraceMs?: number;
  /** How long stop() lets running transitions finish before closing the kit. */
  transitionGraceMs?: number;
}

export interface App {
  readonly grpcPort: number;
  /** Port of /metrics, /healthz, /readyz; null when disabled or the port was taken. */
  readonly metricsPort: number | null;
  readonly kit: Kit;
  readonly metrics: Metrics;
  /** Graceful stop: /readyz 503 and health NOT_SERVING, in-flight RPCs finish, state flushed. */
  stop(): Promise<void>;
}

const log = getLogger(["bigfleet"]);
const SHUTDOWN_GRACE_MS = 10_000;
/** How long a graceful stop lets running transitions finish (Kubernetes gives 30 s by default). */
const TRANSITION_GRACE_MS = 15_000;

export async function startApp(config: Config, opts: AppOptions = {}): Promise<App> {
  const metrics = opts.metrics ?? createMetrics();
  const readiness: Readiness = { ready: false };
  // First, so /healthz answers while the inventory loads and /readyz says 503.
  const ops = config.metricsAddr ? startOpsServer(config.metricsAddr, metrics, readiness) : null;
  const { tls, security } = listenerTls(config.tls);
  const timeouts: Timeouts = { ...DEFAULT_TIMEOUTS, ...opts.timeouts };

  let backend: Backend | undefined;
  let store: StateStore | undefined;
  let kit: Kit | undefined;
  let server: GrpcServer;
  try {
    // First: a second provider on the same state is refused before it does anything.
    store = config.statePath ? await openKvStore(config.statePath) : createMemoryStore();
    backend = opts.backend ?? await createBackend(config, metrics, timeouts);
    if (backend.kind === "fake") {
      log.warn(
        "running the in-memory FAKE backend: no Proxmox VM is ever created (testing and demos only)",
      );
    }
    kit = await startKit({
      provider: config.provider,
      backend,
      store,
      slots: config.slots,
      timeouts,
      observer: metrics.fleet,
    });
    metrics.transitionTimeouts(timeouts);
    server = await startGrpcServer({
      kit: opts.wrapKit ? opts.wrapKit(kit) : kit,
      provider: config.provider,
      host: config.addr.host,
      port: config.addr.port,
      tls,
      reflection: config.reflection,
      observer: createRpcObserver(metrics),
    });
  } catch (e) {
    // The kit closes its store; without a kit the store (and its lock) is closed here.
    await (kit ?? store)?.close().catch(() => {});
    await backend?.close().catch(() => {});
    await ops?.close();
    throw e;
  }

  const stopReconcile = startReconcileLoop(kit, config.reconcileIntervalMs, metrics);
  server.markServing();
  readiness.ready = true;
  log.info("serving CapacityProvider", {
    version: buildInfo().version,
    commit: buildInfo().commit,
    addr: config.addr.raw,
    port: server.port,
    provider: config.provider,
    proxmox_backend: backend.kind,
    security,
    offerings: config.offeringsSource,
    machines: kit.size,
    ...(kit.capacityChange ? { capacity: kit.capacityChange } : {}),
    zones: config.zones.join(","),
    metrics_addr: config.metricsAddr?.raw ?? "",
    metrics_port: ops?.port ?? null,
    state: config.statePath || "memory",
  });

  const liveKit = kit;
  const liveBackend = backend;
  let stopping: Promise<void> | null = null;
  return {
    grpcPort: server.port,
    metricsPort: ops?.port ?? null,
    kit: liveKit,
    metrics,
    stop() {
      stopping ??= (async () => {
        // Probes flip before anything stops, so balancers drain us first.
        readiness.ready = false;
        log.info("shutting down: not ready, finishing in-flight calls");
        stopReconcile();
        await server.shutdown(opts.shutdownGraceMs ?? SHUTDOWN_GRACE_MS);
        await liveKit.close(opts.transitionGraceMs ?? TRANSITION_GRACE_MS);
        await liveBackend.close();
        await ops?.close();
        log.info("stopped");
      })();
      return stopping;
    },
  };
}

/** The backend the config selects, with the real one's startup checks (also for `smoke`). */
export async function createBackend(
  config: Config,
  metrics: Metrics,
  timeouts: Timeouts,
): Promise<Backend> {
  if (config.backend === "fake") return createFakeBackend({ delayMs: config.fakeDelayMs });
  // Loaded on demand: the fake never pays for the Proxmox client.
  const { createProxmoxBackend } = await import("./proxmox/mod.ts");
  return await createProxmoxBackend(config, {
    observe: (op, outcome, seconds) => metrics.apiCall(op, outcome, seconds),
    // In-guest waits end before the kit gives up on the transition.
    timeouts,
  });
}

/** Periodic substrate refresh; returns a function that stops it. */
function startReconcileLoop(kit: Kit, intervalMs: number, metrics: Metrics): () => void {
  if (intervalMs <= 0) return () => {};
  const ac = new AbortController();
  let running = false;
  const timer = setInterval(async () => {
    if (running) return;
    running = true;
    try {
      const res = await kit.reconcile(
        AbortSignal.any([ac.signal, AbortSignal.timeout(intervalMs)]),
      );
      metrics.reconcile("ok");
      if (res.changed + res.orphans > 0) log.info("reconcile updated inventory", { ...res });
    } catch (e) {
      // A pass cut short by shutdown is not a failed reconcile.
      if (!ac.signal.aborted) {
        metrics.reconcile("error");
        log.warn("reconcile failed: {error}", { error: String(e) });
      }
    } finally {
      running = false;
    }
  }, intervalMs);
  return () => {
    clearInterval(timer);
    ac.abort();
  };
}
