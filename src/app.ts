// Assembles one provider from a validated Config: metrics and probes, backend,
// state store, kit, gRPC listener and the reconcile loop. src/cli/serve.ts adds
// the process's concerns (logging, signals, uncaught-error handlers, exit codes); tests
// call startApp directly to inject a backend or wrap the kit.

import { getLogger } from "@logtape/logtape";
import type { Config } from "./config/types.ts";
import { createFakeBackend } from "./fake/backend.ts";
import type { Backend, ZoneRoom } from "./kit/backend.ts";
import { startKit } from "./kit/kit.ts";
import type { Kit, KitRpc } from "./kit/api.ts";
import { openKvStore } from "./store/kv_store.ts";
import { createMemoryStore } from "./kit/store.ts";
import { type Timeouts, withDefaultTimeouts } from "./kit/timeouts.ts";
import { startAdminServer } from "./server/admin.ts";
import type { AdminServer } from "./server/admin.ts";
import { startGrpcServer } from "./server/grpc.ts";
import type { GrpcServer } from "./server/grpc.ts";
import { startOpsServer } from "./server/metrics_http.ts";
import type { OpsServer, Readiness } from "./server/metrics_http.ts";
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
  /** Metrics to record into; src/cli/serve.ts shares them with the uncaught-error handlers. */
  metrics?: Metrics;
  /** Wraps the kit the server calls (tests inject throwing or slow kits). */
  wrapKit?: (kit: Kit) => KitRpc;
  /** How long stop() lets in-flight Get and List calls run before cutting them. */
  shutdownGraceMs?: number;
}

export interface App {
  readonly grpcPort: number;
  /** Port of /metrics, /healthz, /readyz; null when disabled or the port was taken. */
  readonly metricsPort: number | null;
  readonly kit: Kit;
  readonly metrics: Metrics;
  /**
   * Graceful stop (docs/install.md#upgrades-and-restarts): /readyz 503 and
   * health NOT_SERVING, new lifecycle calls refused with UNAVAILABLE while Get
   * and List still answer, running transitions finish within the config's
   * shutdown timeout, then the state is flushed. `now` aborting (a second
   * signal) cuts every wait short. Resolves with what was still running.
   */
  stop(now?: AbortSignal): Promise<StopResult>;
}

export interface StopResult {
  /** Machines whose transition was still running when the stop gave up on it. */
  unfinished: string[];
}

const log = getLogger(["bigfleet"]);
const SHUTDOWN_GRACE_MS = 10_000;
/** Machine ids named in the log line of a stop that gave up on running transitions. */
const LOGGED_IDS = 20;

export async function startApp(config: Config, opts: AppOptions = {}): Promise<App> {
  const metrics = opts.metrics ?? createMetrics();
  const readiness: Readiness = { ready: false };
  const { tls, security } = listenerTls(config.tls);
  const timeouts = withDefaultTimeouts(opts.timeouts);
  // A failed start closes what it started, last first, and throws its own error.
  await using rollback = new AsyncDisposableStack();

  // 1. Probes first, so /healthz answers while the inventory loads and /readyz says 503.
  const ops = config.metricsAddr ? startOpsServer(config.metricsAddr, metrics, readiness) : null;
  if (ops) rollback.defer(() => ops.close().catch(() => {}));
  // 2. The state store, the backend and the kit over them; a new fleet's first commit waits for 3.
  const listening = Promise.withResolvers<void>();
  const { backend, kit } = await startCore(config, opts, metrics, timeouts, listening.promise);
  rollback.defer(() => backend.close().catch(() => {}));
  rollback.defer(() => kit.close().catch(() => {}));
  metrics.transitionTimeouts(timeouts);
  // 3. The gRPC listener, then the admin socket.
  const server = await startGrpcServer({
    kit: opts.wrapKit ? opts.wrapKit(kit) : kit,
    provider: config.provider,
    host: config.addr.host,
    port: config.addr.port,
    tls,
    reflection: config.reflection,
    observer: createRpcObserver(metrics),
  });
  rollback.defer(() => server.shutdown(0).catch(() => {}));
  listening.resolve();
  // The Prometheus exposition loads behind the open port too (src/server/metrics.ts).
  metrics.load().catch((e) =>
    log.error("metrics exposition failed to load: {error}", { error: String(e) })
  );
  const admin = config.adminSocket === null
    ? null
    : await startAdmin(config.adminSocket, kit, metrics, backend.room?.bind(backend) ?? null);
  // Started: from here the app's stop() closes everything.
  rollback.move();

  // 4. Serving: failed machines counted, the reconcile loop, probes and health say so.
  metrics.watchFailed(() => kit.countFailed());
  // Each zone's room, from a backend that counts it (node capacity).
  const roomOf = backend.room?.bind(backend);
  if (roomOf) metrics.watchRoom(roomOf);
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
    admin_socket: admin?.path ?? "",
    metrics_port: ops?.port ?? null,
    state: config.statePath || "memory",
  });

  const running: Running = {
    config,
    opts,
    readiness,
    stopReconcile,
    admin,
    server,
    kit,
    backend,
    ops,
  };
  let stopping: Promise<StopResult> | null = null;
  return {
    grpcPort: server.port,
    metricsPort: ops?.port ?? null,
    kit,
    metrics,
    stop(now) {
      stopping ??= stopApp(running, now);
      return stopping;
    },
  };
}

/**
 * The state store (locked first: a second provider on the same state is
 * refused before it does anything), the backend, and the kit, which from
 * then on owns the store: a failure before that closes what was opened.
 */
async function startCore(
  config: Config,
  opts: AppOptions,
  metrics: Metrics,
  timeouts: Timeouts,
  listening: Promise<void>,
): Promise<{ backend: Backend; kit: Kit }> {
  await using rollback = new AsyncDisposableStack();
  const store = config.statePath
    ? await openKvStore(config.statePath, { firstCommitAfter: listening })
    : createMemoryStore();
  rollback.defer(() => store.close().catch(() => {}));
  const backend = opts.backend ?? await createBackend(config, metrics, timeouts);
  rollback.defer(() => backend.close().catch(() => {}));
  if (backend.kind === "fake") {
    log.warn(
      "running the in-memory FAKE backend: no Proxmox VM is ever created (testing and demos only)",
    );
  }
  const kit = await startKit({
    provider: config.provider,
    backend,
    store,
    slots: config.slots,
    timeouts,
    observer: metrics.fleet,
  });
  // The kit closes the store; the caller closes the backend.
  rollback.move();
  return { backend, kit };
}

async function startAdmin(
  path: string,
  kit: Kit,
  metrics: Metrics,
  room: (() => ZoneRoom[]) | null,
): Promise<AdminServer> {
  try {
    return await startAdminServer({ path, kit, metrics, openStore: (p) => openKvStore(p), room });
  } catch (e) {
    throw new Error(`--admin-socket ${JSON.stringify(path)}: ${(e as Error).message}`);
  }
}

/** What a started app stops. */
interface Running {
  config: Config;
  opts: AppOptions;
  readiness: Readiness;
  stopReconcile: () => void;
  admin: AdminServer | null;
  server: GrpcServer;
  kit: Kit;
  backend: Backend;
  ops: OpsServer | null;
}

/** The graceful stop (App.stop). */
async function stopApp(app: Running, now: AbortSignal | undefined): Promise<StopResult> {
  const { config, opts, readiness, admin, server, kit, backend, ops } = app;
  // Probes flip before anything stops, so balancers drain us first.
  readiness.ready = false;
  app.stopReconcile();
  // No new admin requests; one under way (a recovery) is waited for like a transition.
  const adminClosed = admin?.close();
  const timeoutMs = config.shutdownTimeoutMs;
  const grace = opts.shutdownGraceMs ?? SHUTDOWN_GRACE_MS;
  log.info(
    "shutting down: not ready, new lifecycle calls refused (UNAVAILABLE), Get and List " +
      "still answered",
    { running: kit.running, shutdown_timeout_ms: timeoutMs },
  );
  const timeout = new AbortController();
  const timer = setTimeout(() => timeout.abort(), timeoutMs);
  const cut = now ? AbortSignal.any([now, timeout.signal]) : timeout.signal;
  // Lifecycle calls already on the wire are not new: they get up to the
  // RPC grace to be answered (and to start their transitions) before the
  // wait for transitions; one still arriving after that is refused.
  const arrivals = new AbortController();
  const arrivalTimer = setTimeout(() => arrivals.abort(), grace);
  await server.refuseLifecycle(AbortSignal.any([cut, arrivals.signal]));
  clearTimeout(arrivalTimer);
  if (kit.running > 0 && !cut.aborted) {
    log.info("waiting up to {ms} ms for {count} running transitions", {
      ms: timeoutMs,
      count: kit.running,
    });
  }
  const unfinished = await kit.finish(cut);
  clearTimeout(timer);
  if (unfinished.length > 0) {
    log.warn(
      "stopping with {count} transitions still running ({why}); they come back FAILED " +
        "at the next start",
      {
        count: unfinished.length,
        why: now?.aborted ? "second signal" : `shutdown timeout ${timeoutMs} ms`,
        machines: unfinished.slice(0, LOGGED_IDS).join(","),
      },
    );
  }
  await server.shutdown(now?.aborted ? 0 : grace, now);
  await adminClosed;
  await kit.close();
  await backend.close();
  await ops?.close();
  log.info("stopped");
  return { unfinished };
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
    leaked: () => metrics.leakedVolume(),
    // In-guest waits end before the kit gives up on the transition.
    timeouts,
  });
}

/**
 * Substrate refresh: one pass as soon as the provider serves (a crash may have
 * left VMs the state does not show: docs/troubleshooting.md#machines-failed),
 * then one per interval. Returns a function that stops it.
 */
function startReconcileLoop(kit: Kit, intervalMs: number, metrics: Metrics): () => void {
  if (intervalMs <= 0) return () => {};
  const ac = new AbortController();
  let running = false;
  const pass = async () => {
    if (running) return;
    running = true;
    try {
      const res = await kit.reconcile(
        AbortSignal.any([ac.signal, AbortSignal.timeout(intervalMs)]),
      );
      metrics.reconcile("ok");
      if (res.changed + res.orphans + res.rejoined > 0) {
        log.info("reconcile updated inventory", { ...res });
      }
    } catch (e) {
      // A pass cut short by shutdown is not a failed reconcile.
      if (!ac.signal.aborted) {
        metrics.reconcile("error");
        log.warn("reconcile failed: {error}", { error: String(e) });
      }
    } finally {
      running = false;
    }
  };
  pass();
  const timer = setInterval(pass, intervalMs);
  return () => {
    clearInterval(timer);
    ac.abort();
  };
}
