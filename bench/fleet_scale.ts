// Fleet-scale figures of the provider process, per fleet size: resident
// memory (idle, and peak while serving full Lists and a mixed load), List /
// Get / Create-ack latency end to end over gRPC, durable lifecycle
// transitions per second from 16 concurrent clients with the provider's CPU
// time per transition, and restart time on an existing state with where it
// goes. Results are merged into bench/results/fleet_scale.json and rendered
// into the fleet-scale section of bench/RESULTS.md.
//
//   deno task bench:fleet                   # 1k, 20k, 50k, 100k
//   deno task bench:fleet 20000             # one size (others keep their rows)
//   BENCH_QUICK=1 deno task bench:fleet 1000   # fewer rounds, nothing recorded
//   BENCH_DRY=1 …                              # full rounds, nothing recorded
//   BFCONF_PROVIDER_CMD="…"                    # another provider command (tests/harness)
//
// Memory is read from /proc/<pid>/status (VmRSS, VmHWM reset per phase with
// clear_refs), CPU from /proc/<pid>/stat: both hold up on a busy machine.
// Latency does not: every row records the load average it ran under.

import { loadavg } from "node:os";
import { fakeProviderArgs, sleep, startProvider } from "../tests/harness/mod.ts";
import type { ProviderProcess } from "../tests/harness/mod.ts";
import { cpuMs, MIB, peakRssBytes, resetPeak, rssBytes } from "../tests/harness/proc_status.ts";
import { RawClient, readAck, readList, readMachine } from "../tests/harness/raw_client.ts";
import type { BenchToken } from "../tests/harness/raw_client.ts";
import { lifecycleLoad } from "./lifecycle_load.ts";
import { percentile, timeCalls } from "./stats.ts";
import { renderResults } from "./fleet_report.ts";
import type { RestartPhases, SizeResult } from "./fleet_report.ts";

const QUICK = Deno.env.get("BENCH_QUICK") === "1";
/** Measure and print only; bench/RESULTS.md and the JSON stay as they are. */
const DRY = QUICK || Deno.env.get("BENCH_DRY") === "1";
const SIZES = Deno.args.length > 0 ? Deno.args.map(Number) : [1_000, 20_000, 50_000, 100_000];
const LISTS = QUICK ? 20 : 120;
const GETS = QUICK ? 300 : 2_000;
const CREATES = QUICK ? 100 : 1_000;
const WORKERS = 16;
const LOAD_MS = QUICK ? 2_000 : 6_000;
const RESTARTS = 3;
/**
 * Idle RSS: the process left alone this long after it accepts, so V8's
 * memory reducer has returned the boot's garbage (it acts 10–20 s after the
 * process goes quiet with the provider's flags; docs/performance.md).
 */
const IDLE_MS = QUICK ? 3_000 : 22_000;
const RESULTS_JSON = new URL("./results/fleet_scale.json", import.meta.url);
const RESULTS_MD = new URL("./RESULTS.md", import.meta.url);

const mib = (bytes: number) => Math.round(bytes / MIB);

function boot(seed: number, state: string): Promise<ProviderProcess> {
  return startProvider({
    args: fakeProviderArgs({ seed, state }),
    readyPollMs: 2,
    readyTimeoutMs: 120_000,
  });
}

async function restartPhases(state: string, seed: number): Promise<RestartPhases> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      "--unstable-kv",
      new URL("./restart_phases.ts", import.meta.url).pathname,
      state,
      String(seed),
    ],
    stderr: "inherit",
  }).output();
  if (!out.success) throw new Error("restart_phases.ts failed");
  return JSON.parse(new TextDecoder().decode(out.stdout));
}

async function idleRss(pid: number): Promise<number> {
  await sleep(IDLE_MS);
  return rssBytes(pid);
}

function loadAverage(): number {
  return loadavg()[0];
}

async function measure(seed: number): Promise<SizeResult> {
  const dir = await Deno.makeTempDir({ prefix: "bench-fleet-" });
  const state = `${dir}/state.kv`;
  const loadBefore = loadAverage();
  let p: ProviderProcess | undefined;
  try {
    p = await boot(seed, state);
    const firstBootMs = p.readyMs;
    const bootPeak = peakRssBytes(p.pid);
    const idleFresh = await idleRss(p.pid);

    const c = new RawClient(p.addr);
    const first = await c.list();
    const ids = readList(first).map((m) => m.id);
    if (ids.length !== seed) throw new Error(`List returned ${ids.length} of ${seed} machines`);

    // Full Lists, one after another.
    resetPeak(p.pid);
    let cpu0 = cpuMs(p.pid);
    const lists = await timeCalls(LISTS, async () => {
      const b = await c.list();
      if (b.length < first.length / 2) throw new Error("short List");
    });
    const listCpuMs = (cpuMs(p.pid) - cpu0) / LISTS;
    const peakLists = peakRssBytes(p.pid);

    cpu0 = cpuMs(p.pid);
    const gets = await timeCalls(GETS, async (i) => {
      readMachine(await c.get(ids[(i * 7919) % ids.length]));
    });
    const getCpuUs = (cpuMs(p.pid) - cpu0) * 1000 / GETS;

    // Create acks: each answer waits for its KV commit.
    const spec = ids.slice(0, Math.min(CREATES, seed >> 2));
    const token = (seq: number): BenchToken => ({ shard: "bench-acks", epoch: 1, seq });
    const creates = await timeCalls(spec.length, async (i) => {
      const m = readAck(await c.create(spec[i], token(i + 1)));
      if (m.id !== spec[i]) throw new Error("ack for another machine");
    });

    // Durable transitions from 16 clients, and the provider CPU they cost.
    const workerIds = ids.slice(-WORKERS);
    resetPeak(p.pid);
    cpu0 = cpuMs(p.pid);
    const load = await lifecycleLoad(p.addr, workerIds, LOAD_MS);
    const cpuPerTransitionUs = (cpuMs(p.pid) - cpu0) * 1000 / load.transitions;
    const peakLoad = peakRssBytes(p.pid);

    // Mixed: the same 16 clients (on fresh machines) while one client Lists in a loop.
    resetPeak(p.pid);
    let mixing = true;
    const mixedLists: number[] = [];
    const lister = (async () => {
      while (mixing) {
        const t0 = performance.now();
        await c.list();
        mixedLists.push(performance.now() - t0);
      }
    })();
    const mixedIds = ids.slice(-2 * WORKERS, -WORKERS);
    const mixed = await lifecycleLoad(p.addr, mixedIds, LOAD_MS);
    mixing = false;
    await lister;
    const peakMixed = peakRssBytes(p.pid);
    c.close();

    const restartMs: number[] = [];
    let restartPeak = 0;
    for (let i = 0; i < RESTARTS; i++) {
      await p.stop();
      p = await boot(seed, state);
      restartMs.push(p.readyMs);
      restartPeak = Math.max(restartPeak, peakRssBytes(p.pid));
    }
    const idleRestarted = await idleRss(p.pid);
    await p.stop();
    const phases = await restartPhases(state, seed);

    mixedLists.sort((a, b) => a - b);
    return {
      machines: seed,
      date: new Date().toISOString().slice(0, 10),
      loadAverage: Math.max(loadBefore, loadAverage()),
      listBytes: first.length,
      firstBootMs: Math.round(firstBootMs),
      idleFreshMiB: mib(idleFresh),
      idleRestartedMiB: mib(idleRestarted),
      peakBootMiB: mib(bootPeak),
      peakListsMiB: mib(peakLists),
      peakLoadMiB: mib(peakLoad),
      peakMixedMiB: mib(peakMixed),
      peakRestartMiB: mib(restartPeak),
      lists: LISTS,
      listP50Ms: percentile(lists, 0.5),
      listP99Ms: percentile(lists, 0.99),
      listMixedP99Ms: percentile(mixedLists, 0.99),
      listCpuMs,
      getCpuUs: Math.round(getCpuUs),
      getP50Ms: percentile(gets, 0.5),
      getP99Ms: percentile(gets, 0.99),
      createP50Ms: percentile(creates, 0.5),
      createP99Ms: percentile(creates, 0.99),
      transitionsPerSec: Math.round(load.transitions / load.seconds),
      mixedTransitionsPerSec: Math.round(mixed.transitions / mixed.seconds),
      retries: load.retries,
      cpuPerTransitionUs: Math.round(cpuPerTransitionUs),
      restartMs: restartMs.sort((a, b) => a - b).map(Math.round),
      phases,
    };
  } finally {
    await p?.stop();
    await Deno.remove(dir, { recursive: true });
  }
}

function readResults(): SizeResult[] {
  try {
    return JSON.parse(Deno.readTextFileSync(RESULTS_JSON));
  } catch {
    return [];
  }
}

const results = readResults();
for (const seed of SIZES) {
  console.error(`fleet of ${seed}…`);
  const r = await measure(seed);
  console.error(JSON.stringify(r));
  const i = results.findIndex((x) => x.machines === seed);
  if (i >= 0) results[i] = r;
  else results.push(r);
  results.sort((a, b) => a.machines - b.machines);
}
if (!DRY) {
  Deno.mkdirSync(new URL("./results/", import.meta.url), { recursive: true });
  Deno.writeTextFileSync(RESULTS_JSON, JSON.stringify(results, null, 2) + "\n");
  const md = Deno.readTextFileSync(RESULTS_MD);
  Deno.writeTextFileSync(RESULTS_MD, renderResults(md, results));
  // Keep the file as `deno fmt` writes it (aligned tables), so fmt --check stays clean.
  await new Deno.Command(Deno.execPath(), { args: ["fmt", "-q", RESULTS_MD.pathname] }).output();
}
console.log(renderResults("", results));
