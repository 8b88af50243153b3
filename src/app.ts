// Assembles one provider from a validated Config: backend, state store, kit,
// gRPC listener and the reconcile loop. main.ts adds process concerns (flags,
// signals, exit codes); tests call startApp directly to inject a backend.

import * as grpc from "@grpc/grpc-js";
import { getLogger } from "@logtape/logtape";
import type { Config } from "./config/types.ts";
import { createFakeBackend } from "./fake/backend.ts";
import type { Backend } from "./kit/backend.ts";
import { startKit } from "./kit/kit.ts";
import type { Kit, Timeouts } from "./kit/kit.ts";
import { openKvStore } from "./kit/kv_store.ts";
import { createMemoryStore } from "./kit/store.ts";
import { startGrpcServer } from "./server/grpc.ts";
import type { Method, RpcObserver } from "./server/grpc.ts";

export interface AppOptions {
  /** Replaces the backend the config selects (tests inject failing or blocking ones). */
  backend?: Backend;
  /** Transition timeouts in ms; defaults are the contract's. */
  timeouts?: Partial<Timeouts>;
}

export interface App {
  readonly grpcPort: number;
  readonly kit: Kit;
  /** Graceful stop: health NOT_SERVING, in-flight RPCs finish, state flushed. */
  stop(): Promise<void>;
}

const log = getLogger(["bigfleet"]);
const rpcLog = getLogger(["bigfleet", "rpc"]);
const READS: ReadonlySet<Method> = new Set(["Get", "List"]);
const SHUTDOWN_GRACE_MS = 10_000;

export async function startApp(config: Config, opts: AppOptions = {}): Promise<App> {
  const backend = opts.backend ?? await createBackend(config);
  if (backend.kind === "fake") {
    log.warn(
      "running the in-memory FAKE backend: no Proxmox VM is ever created (testing and demos only)",
    );
  }
  const store = config.statePath ? await openKvStore(config.statePath) : createMemoryStore();
  const kit = await startKit({
    provider: config.provider,
    backend,
    store,
    catalog: config.catalog,
    slots: config.slots,
    timeouts: opts.timeouts,
  });

  const observer: RpcObserver = {
    rpc(method, code, seconds, error) {
      const props = { method, code: grpc.status[code] ?? String(code), dur_ms: seconds * 1000 };
      if (error !== null) rpcLog.warn("{method} failed: {error}", { ...props, error });
      else if (READS.has(method)) rpcLog.debug("{method}", props);
      else rpcLog.info("{method}", props);
    },
    panic(method, error) {
      rpcLog.error("{method} handler threw: {error}", { method, error: String(error) });
    },
  };

  const server = await startGrpcServer({
    kit,
    provider: config.provider,
    host: config.addr.host,
    port: config.addr.port,
    credentials: grpc.ServerCredentials.createInsecure(),
    reflection: config.reflection,
    observer,
  });

  const stopReconcile = startReconcileLoop(kit, config.reconcileIntervalMs);
  server.markServing();
  log.info("serving CapacityProvider", {
    addr: config.addr.raw,
    port: server.port,
    provider: config.provider,
    proxmox_backend: backend.kind,
    security: "insecure",
    offerings: config.offeringsSource,
    machines: kit.size,
    zones: config.zones.join(","),
    metrics_addr: config.metricsAddr?.raw ?? "",
    state: config.statePath || "memory",
  });

  let stopping: Promise<void> | null = null;
  return {
    grpcPort: server.port,
    kit,
    stop() {
      stopping ??= (async () => {
        stopReconcile();
        await server.shutdown(SHUTDOWN_GRACE_MS);
        await kit.close();
        await backend.close();
        log.info("stopped");
      })();
      return stopping;
    },
  };
}

async function createBackend(config: Config): Promise<Backend> {
  if (config.backend === "fake") {
    return createFakeBackend({ zones: config.zones, delayMs: config.fakeDelayMs });
  }
  // Loaded on demand: the fake never pays for the Proxmox client.
  const modPath = "./proxmox/mod.ts";
  const { createProxmoxBackend } = await import(modPath);
  return await createProxmoxBackend(config);
}

/** Periodic substrate refresh; returns a function that stops it. */
function startReconcileLoop(kit: Kit, intervalMs: number): () => void {
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
      if (res.changed + res.orphans > 0) log.info("reconcile updated inventory", { ...res });
    } catch (e) {
      log.warn("reconcile failed: {error}", { error: String(e) });
    } finally {
      running = false;
    }
  }, intervalMs);
  return () => {
    clearInterval(timer);
    ac.abort();
  };
}
