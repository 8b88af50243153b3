// The work of `smoke` (its flags and help: smoke.ts). The machine is a slot
// of its own (`<provider>/smoke/<type>/<zone>/<run id>`), so it can never be
// one of the provider's machines, and the kit runs on an in-memory store: the
// provider's state is never written, only its lock held.

import { hostname } from "node:os";
import { createBackend } from "../app.ts";
import { flagError, forFlag, oneLine, quote } from "../config/errors.ts";
import { loadConfig } from "../config/load.ts";
import { allocatableOf } from "../config/catalog.ts";
import { type Config, ConfigError } from "../config/types.ts";
import type { Backend } from "../kit/backend.ts";
import type { Kit } from "../kit/api.ts";
import { startKit } from "../kit/kit.ts";
import { DEFAULT_TIMEOUTS } from "../kit/timeouts.ts";
import { EDGES, type MachineRecord, type OpKind, State, STATE_NAMES } from "../kit/model.ts";
import type { Slot } from "../kit/model.ts";
import { lockState, type StateLock } from "../store/state_lock.ts";
import { createMemoryStore } from "../kit/store.ts";
import { setupLogging } from "../server/log.ts";
import { createMetrics } from "../server/metrics.ts";
import {
  type Context,
  EXIT_FAILURE,
  EXIT_OK,
  EXIT_USAGE,
  fail,
  parseCommandArgs,
  positiveDuration,
  servingArgv,
  write,
} from "./command.ts";
import { FLAG_TABLE, type FlagTable } from "../config/flags.ts";
import { FLAGS } from "./smoke.ts";
import { LEVEL_ENV } from "../config/logging.ts";

/** What to do when a step fails, by step (the last_error says what happened). */
const FIXES: Record<OpKind | "gone", string> = {
  create: "run `bigfleet-proxmox preflight` with the same flags; the template must clone to this " +
    "zone and boot with the QEMU guest agent enabled and running (docs/templates.md, " +
    "docs/troubleshooting.md#guest-agent-never-answers)",
  configure: "the bootstrap hook must exist in the template and exit 0 with this blob: check " +
    "--bootstrap-path and --bootstrap-exec and run the hook by hand in a clone " +
    "(docs/templates.md#4-the-bootstrap-hook, docs/troubleshooting.md#bootstrap-hook-exits-non-zero)",
  drain: "kubectl must be in the guest's PATH with a kubeconfig that can drain the node " +
    "(docs/templates.md#5-what-drain-needs, docs/troubleshooting.md#drain-fails)",
  delete: "the VM must not be protected or locked and the token needs VM.Allocate on it " +
    "(docs/credentials.md, docs/troubleshooting.md#locks-and-slow-clones)",
  gone: "a VM still carries the smoke machine's marker: destroy it by hand (qm destroy)",
};

const POLL_MS = 100;

interface Run {
  kit: Kit;
  backend: Backend;
  id: string;
  shardId: string;
  epoch: bigint;
  seq: bigint;
  stop: AbortSignal;
}

export async function runSmoke(args: string[], ctx: Context): Promise<number> {
  const p = parseCommandArgs(FLAGS, args, ctx);
  if (typeof p === "number") return p;
  const v = p.values;
  let config: Config;
  let bootstrap: Uint8Array;
  let graceSeconds: bigint;
  let slot: Slot;
  try {
    config = await loadConfig(servingArgv(FLAG_TABLE as FlagTable, v));
    if (v["bootstrap-file"] === "") throw flagError("bootstrap-file", "is required");
    bootstrap = await readBytes("bootstrap-file", v["bootstrap-file"]);
    graceSeconds = BigInt(
      Math.ceil(forFlag("drain-grace", () => positiveDuration(v["drain-grace"])) / 1000),
    );
    if (v["cluster-id"].trim() === "") throw flagError("cluster-id", "is empty");
    slot = smokeSlot(config, v["instance-type"], v.zone);
  } catch (e) {
    if (e instanceof ConfigError) return fail(e.message, EXIT_USAGE);
    throw e;
  }
  // The steps are the output; the logs (stderr) only from WARN unless a level was asked for.
  const quiet = v["log-level"] === "" && !Deno.env.get(LEVEL_ENV);
  setupLogging(quiet ? { ...config.log, level: "warning" } : config.log);

  let lock: StateLock | null = null;
  if (config.statePath !== "") {
    try {
      lock = await lockState(config.statePath);
    } catch (e) {
      return fail(
        `--state ${quote(config.statePath)}: ${oneLine((e as Error).message)}; smoke runs only ` +
          "while no provider serves on this state (its reconcile would take the smoke VM for an orphan)",
        EXIT_FAILURE,
      );
    }
  }
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  let backend: Backend | undefined;
  try {
    backend = await createBackend(config, createMetrics(), DEFAULT_TIMEOUTS);
    const kit = await startKit({
      provider: config.provider,
      backend,
      store: createMemoryStore(),
      slots: [slot],
    });
    const run: Run = {
      kit,
      backend,
      id: slot.id,
      shardId: `smoke-${hostname()}-${Deno.pid}`,
      epoch: BigInt(Date.now()),
      seq: 0n,
      stop: stop.signal,
    };
    try {
      return await walk(run, {
        clusterId: v["cluster-id"],
        bootstrap,
        graceSeconds,
        zone: slot.zone,
        type: slot.instanceType,
      });
    } finally {
      await kit.close();
    }
  } catch (e) {
    return fail(`smoke could not start: ${oneLine((e as Error).message)}`, EXIT_FAILURE);
  } finally {
    Deno.removeSignalListener("SIGINT", onSignal);
    Deno.removeSignalListener("SIGTERM", onSignal);
    await backend?.close();
    lock?.release();
  }
}

async function readBytes(flag: string, path: string): Promise<Uint8Array> {
  try {
    return await Deno.readFile(path);
  } catch (err) {
    throw flagError(flag, `cannot read ${quote(path)}: ${oneLine(String(err))}`);
  }
}

/** The smoke machine's slot: the chosen (or first offered) type and zone, an id no offering has. */
function smokeSlot(config: Config, typeFlag: string, zoneFlag: string): Slot {
  const first = config.slots[0];
  const instanceType = typeFlag || first?.instanceType;
  const zone = zoneFlag || first?.zone;
  if (instanceType === undefined || zone === undefined) {
    throw flagError("instance-type", "and --zone are needed: the offerings have no slot");
  }
  const type = config.catalog.get(instanceType);
  if (type === undefined) {
    throw flagError(
      "instance-type",
      `${quote(instanceType)} is not in the catalog (${[...config.catalog.keys()].join(", ")})`,
    );
  }
  const zones = config.proxmox?.nodes ?? config.zones;
  if (!zones.includes(zone)) {
    throw flagError("zone", `${quote(zone)} is not one of ${zones.join(", ")}`);
  }
  const runId = Date.now().toString(36);
  return {
    id: `${config.provider}/smoke/${instanceType}/${zone}/${runId}`,
    instanceType,
    zone,
    pricePerHour: 0,
    resources: [],
    allocatable: allocatableOf(type),
    labels: [],
  };
}

interface Walk {
  clusterId: string;
  bootstrap: Uint8Array;
  graceSeconds: bigint;
  zone: string;
  type: string;
}

/** The four steps and the final check; prints one line each, and cleans up after a failure. */
async function walk(run: Run, w: Walk): Promise<number> {
  const t0 = performance.now();
  write(`smoke: machine ${run.id} (${w.type} in zone ${w.zone}), shard ${run.shardId}\n`);
  const steps: [OpKind, () => Promise<unknown>][] = [
    ["create", () => run.kit.create(call(run))],
    ["configure", () =>
      run.kit.configure({
        ...call(run),
        clusterId: w.clusterId,
        bootstrap: w.bootstrap,
        shardMetadata: [],
      })],
    ["drain", () => run.kit.drain({ ...call(run), graceSeconds: w.graceSeconds })],
    ["delete", () => run.kit.delete(call(run))],
  ];
  for (const [kind, start] of steps) {
    const s0 = performance.now();
    let m: MachineRecord;
    try {
      await start();
      m = await settled(run, kind);
    } catch (e) {
      return await failed(run, kind, s0, oneLine((e as Error).message));
    }
    if (m.state !== EDGES[kind].to) {
      const why = m.state === State.Failed ? m.lastError : `ended ${STATE_NAMES[m.state]}`;
      return await failed(run, kind, s0, why);
    }
    write(line("PASS", kind, s0, describe(kind, m, w)));
  }
  const g0 = performance.now();
  const left = (await run.backend.describe(AbortSignal.timeout(120_000)))
    .filter((vm) => vm.machineId === run.id);
  if (left.length > 0) {
    write(line("FAIL", "gone", g0, `still there: ${left.map((vm) => vm.hostRef).join(", ")}`));
    write(`      fix: ${FIXES.gone}\n`);
    write("smoke FAILED at gone\n");
    return EXIT_FAILURE;
  }
  write(line("PASS", "gone", g0, "no VM carries the machine any more"));
  write(`smoke passed in ${seconds(t0)}\n`);
  return EXIT_OK;
}

/** The next fenced call of the run: same shard and epoch, the sequence one higher. */
function call(run: Run) {
  run.seq++;
  return {
    machineId: run.id,
    token: { shardId: run.shardId, epoch: run.epoch, seq: run.seq },
  };
}

/** The machine once its `kind` transition has landed (the kit's deadline bounds the wait). */
async function settled(run: Run, kind: OpKind): Promise<MachineRecord> {
  for (;;) {
    const m = await run.kit.get(run.id);
    if (m.state !== EDGES[kind].via) return m;
    if (run.stop.aborted) throw new Error("interrupted (SIGINT/SIGTERM)");
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

function describe(kind: OpKind, m: MachineRecord, w: Walk): string {
  switch (kind) {
    case "create":
      return `IDLE, VM ${m.hostRef}`;
    case "configure":
      return `CONFIGURED in cluster ${w.clusterId}: the bootstrap hook exited 0`;
    case "drain":
      return "IDLE: drained";
    case "delete":
      return "SPECULATIVE: VM destroyed";
  }
}

/** Destroys every VM that carries the smoke machine (a failed Create may have left one). */
async function cleanUp(run: Run): Promise<void> {
  const signal = AbortSignal.timeout(DEFAULT_TIMEOUTS.delete);
  try {
    const vms = (await run.backend.describe(signal)).filter((vm) => vm.machineId === run.id);
    if (vms.length === 0) write("cleanup: no VM was left\n");
    for (const vm of vms) {
      await run.backend.delete({ machineId: run.id, hostRef: vm.hostRef }, signal);
      write(`cleanup: VM ${vm.hostRef} destroyed\n`);
    }
  } catch (e) {
    write(
      `cleanup: failed (${oneLine((e as Error).message)}); destroy the VM of ${run.id} by hand\n`,
    );
  }
}

/** Prints the failed step, its error and the fix, then destroys what the machine left. */
async function failed(
  run: Run,
  kind: OpKind,
  s0: number,
  why: string,
): Promise<number> {
  write(line("FAIL", kind, s0, why));
  write(`      fix: ${FIXES[kind]}\n`);
  await cleanUp(run);
  write(`smoke FAILED at ${kind}\n`);
  return EXIT_FAILURE;
}

function line(status: "PASS" | "FAIL", step: string, since: number, text: string): string {
  return `${status}  ${step.padEnd(9)}  ${seconds(since).padStart(7)}  ${oneLine(text)}\n`;
}

function seconds(since: number): string {
  return `${((performance.now() - since) / 1000).toFixed(1)}s`;
}
