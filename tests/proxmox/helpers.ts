// Shared setup for the backend tests: a simulator, a Config pointing at it,
// fast timings, and a log capture used to prove secrets never reach logs.

import { configureSync, type LogRecord, resetSync } from "@logtape/logtape";
import net from "node:net";
import { builtinCatalog } from "../../src/config/catalog.ts";
import { roomPolicy } from "../../src/config/room.ts";
import type { Config, ProxmoxConfig, TemplateSource } from "../../src/config/types.ts";
import type { SlotSpec } from "../../src/kit/backend.ts";
import {
  type ApiOp,
  createProxmoxBackend,
  type ProxmoxBackend,
  type ProxmoxDeps,
  type Timing,
} from "../../src/proxmox/mod.ts";
import { type SimAcl, type SimOptions, type Simulator, startSimulator } from "../pvesim/mod.ts";
import { aclOf, ROLES_PVE8, setupToken } from "../deploy/setup_token.ts";
import { type OpsProvider, startWithMetrics } from "../server/helpers.ts";

export const FAST: Partial<Timing> = {
  task: { initialMs: 10, maxMs: 40 },
  exec: { initialMs: 10, maxMs: 40 },
  agentPollMs: 25,
  agentTimeoutMs: 4000,
  readyPollMs: 50,
  settleMs: 25,
  requestTimeoutMs: 8000,
  retryBaseMs: 10,
  cloneSettleMs: 1500,
  probeTimeoutMs: 4000,
  volumeRetry: { initialMs: 10, maxMs: 40 },
  outageRecheck: { initialMs: 50, maxMs: 200 },
};

/** Every log record the backend emitted, rendered as one line each (message + properties). */
export const logLines: string[] = [];

let logsConfigured = false;
export function captureLogs(): void {
  if (logsConfigured) return;
  logsConfigured = true;
  resetSync();
  configureSync({
    sinks: {
      mem: (r: LogRecord) => {
        logLines.push(
          `${r.level} ${r.message.map(String).join("")} ${
            JSON.stringify(r.properties, (_k, v) => typeof v === "bigint" ? String(v) : v)
          }`,
        );
      },
    },
    loggers: [
      { category: ["bigfleet"], lowestLevel: "debug", sinks: ["mem"] },
      { category: ["logtape", "meta"], lowestLevel: "error", sinks: [] },
    ],
  });
}

/** The simulator's default template: VM 9000 on pve1, on shared storage. */
export const DEFAULT_TEMPLATE: TemplateSource = { kind: "vmid", vmid: 9000 };

export function configFor(
  sim: Simulator,
  over: Partial<ProxmoxConfig> = {},
  extra: Partial<Config> = {},
): Config {
  const proxmox: ProxmoxConfig = {
    apiUrl: sim.url,
    tokenId: sim.tokenId,
    tokenSecret: sim.tokenSecret,
    tokenFile: null,
    caPem: sim.caPem,
    fingerprint: null,
    pool: "bigfleet",
    nodes: ["pve1", "pve2"],
    tags: ["bigfleet"],
    callsPerNode: 2,
    clonesPerStorage: 2,
    room: roomPolicy({}, over.nodes ?? ["pve1", "pve2"]),
    ...over,
  };
  return {
    addr: { host: "", port: 0, raw: ":0" },
    provider: "proxmox",
    backend: "proxmox",
    fakeDelayMs: 0,
    proxmox,
    catalog: builtinCatalog(DEFAULT_TEMPLATE),
    offerings: [],
    slots: [],
    offeringsSource: "built-in",
    zones: proxmox.nodes,
    template: DEFAULT_TEMPLATE,
    bootstrapPath: "/run/bigfleet-bootstrap",
    bootstrapExec: ["/bin/sh"],
    readyGate: { exec: null, timeoutMs: 0 },
    reconcileIntervalMs: 0,
    shutdownTimeoutMs: 0,
    statePath: "",
    adminSocket: null,
    metricsAddr: null,
    reflection: false,
    tls: null,
    log: { level: "info", format: "json" },
    warnings: [],
    ...extra,
  };
}

export interface Observed {
  op: ApiOp;
  outcome: "ok" | "error";
  seconds: number;
}

export interface Rig {
  sim: Simulator;
  backend: ProxmoxBackend;
  cfg: Config;
  observed: Observed[];
  [Symbol.asyncDispose](): Promise<void>;
}

/** Start a simulator and a backend on it (`prepare` runs in between); `await using` tears both down. */
export async function rig(
  simOpts: SimOptions = {},
  over: Partial<ProxmoxConfig> | ((sim: Simulator) => Partial<ProxmoxConfig>) = {},
  deps: ProxmoxDeps = {},
  extra: Partial<Config> = {},
  prepare?: (sim: Simulator) => void,
): Promise<Rig> {
  captureLogs();
  const sim = await startSimulator({
    timing: {
      cloneMs: 120,
      cloneNamelessMs: 40,
      taskMs: 20,
      agentBootMs: 80,
      resourcesLagMs: 60,
      execMs: 20,
    },
    ...simOpts,
  });
  prepare?.(sim);
  const cfg = configFor(sim, typeof over === "function" ? over(sim) : over, extra);
  const observed: Observed[] = [];
  let backend: ProxmoxBackend;
  try {
    backend = await createProxmoxBackend(cfg, {
      timing: FAST,
      observe: (op, outcome, seconds) => observed.push({ op, outcome, seconds }),
      ...deps,
    });
  } catch (err) {
    await sim.close();
    throw err;
  }
  return {
    sim,
    backend,
    cfg,
    observed,
    async [Symbol.asyncDispose]() {
      await backend.close();
      await sim.close();
    },
  };
}

let seq = 0;
/** A slot's create call; sized by the instance type's catalog entry (pve.small: 2 vCPU, 4 GiB). */
export function slot(zone = "pve1", over: Partial<SlotSpec> = {}): SlotSpec {
  seq++;
  return {
    machineId: `proxmox/OnDemand/pve.small/${zone}/${String(seq).padStart(3, "0")}`,
    operationId: `op-${seq}`,
    instanceType: "pve.small",
    zone,
    ...over,
  };
}

export const signal = () => AbortSignal.timeout(20_000);

export function vmidOf(hostRef: string): number {
  return Number(hostRef.split("/")[1]);
}

/** Guest `vmid` as /cluster/resources lists it now (undefined when not listed). */
export async function listedGuest(
  sim: Simulator,
  vmid: number,
): Promise<Record<string, unknown> | undefined> {
  const client = Deno.createHttpClient({ caCerts: [sim.caPem] });
  try {
    const res = await fetch(`${sim.url}/cluster/resources?type=vm`, {
      headers: { Authorization: sim.authHeader },
      client,
    });
    const { data } = await res.json() as { data: Record<string, unknown>[] };
    return data.find((e) => e.vmid === vmid);
  } finally {
    client.close();
  }
}

/** All requests that carried a valid token. */
export function authed(sim: Simulator) {
  return sim.requests.filter((r) => r.authenticated);
}

/**
 * A TCP relay in front of a server. `route(n)` picks the upstream port of the
 * n-th connection (from 0); `swap(port)` sends every later connection to
 * `port` and cuts the open ones (forcing new handshakes).
 */
export async function tcpRelay(route: (n: number) => number) {
  let pick = route;
  let n = 0;
  const open = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const up = net.connect(pick(n++), "127.0.0.1");
    open.add(client).add(up);
    client.pipe(up).pipe(client);
    const end = () => {
      client.destroy();
      up.destroy();
      open.delete(client);
      open.delete(up);
    };
    client.on("error", end).on("close", end);
    up.on("error", end).on("close", end);
  });
  await new Promise<void>((f) => server.listen(0, "127.0.0.1", f));
  return {
    port: (server.address() as net.AddressInfo).port,
    swap(port: number) {
      pick = () => port;
      for (const s of open) s.destroy();
    },
    close() {
      for (const s of open) s.destroy();
      return new Promise<void>((f) => server.close(() => f()));
    },
  };
}

/**
 * Flags for a provider process on `sim` (token from `tokenFile`). `trust`
 * defaults to the simulator's CA file; `apiUrl` to the simulator itself.
 */
export function providerArgs(
  sim: Simulator,
  tokenFile: string,
  o: { trust?: string[]; apiUrl?: string; seed?: number } = {},
): string[] {
  return [
    "--provider=pve-test",
    `--proxmox-api-url=${o.apiUrl ?? sim.url}`,
    `--proxmox-token-id=${sim.tokenId}`,
    `--proxmox-token-file=${tokenFile}`,
    "--nodes=pve1,pve2",
    "--proxmox-pool=bigfleet",
    `--seed-count=${o.seed ?? 4}`,
    "--metrics-addr=",
    ...(o.trust ?? [`--proxmox-ca-file=${sim.caFile}`]),
  ];
}

/**
 * The ACL deploy/host-setup/setup-token.sh writes for PVE 8 with `args`
 * (the simulator's template disk is on ceph-vm, so that storage is granted).
 */
export async function setupTokenAcl(...args: string[]): Promise<SimAcl> {
  const res = await setupToken({ roles: ROLES_PVE8 }, ["--storages", "ceph-vm", ...args]);
  if (res.code !== 0) throw new Error(`setup-token.sh failed: ${res.stderr}`);
  return aclOf(res.mutations);
}

/** A simulator and provider processes on it sharing one --state, with metrics on. */
export interface ProviderRig {
  sim: Simulator;
  dir: string;
  state: string;
  tokenFile: string;
  /** A provider process (the real backend, /metrics on a free port) on the rig's state. */
  start(extra?: string[]): Promise<OpsProvider>;
  [Symbol.asyncDispose](): Promise<void>;
}

export async function providerRig(simOpts: SimOptions = {}): Promise<ProviderRig> {
  const sim = await startSimulator({ nodes: ["pve1", "pve2"], ...simOpts });
  const dir = await Deno.makeTempDir({ prefix: "bf-pve-rig-" });
  const tokenFile = `${dir}/token`;
  await Deno.writeTextFile(tokenFile, sim.tokenSecret);
  const state = `${dir}/state.kv`;
  return {
    sim,
    dir,
    state,
    tokenFile,
    start: (extra = []) =>
      startWithMetrics([
        ...providerArgs(sim, tokenFile).filter((a) => a !== "--metrics-addr="),
        `--state=${state}`,
        ...extra,
      ], { real: true }),
    async [Symbol.asyncDispose]() {
      await sim.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}
