// The fleet-scale figures as Markdown: one table per run set, spliced into
// bench/RESULTS.md between its fleet-scale markers.

import { cpus } from "node:os";

/** Milliseconds of each restart phase (bench/restart_phases.ts). */
export interface RestartPhases {
  /** Deno start and the module graph of main.ts, until a flag error exits. */
  processMs: number;
  /** Flag parsing and slot expansion. */
  configMs: number;
  openMs: number;
  /** StateStore.load(): every record read and decoded. */
  loadMs: number;
  /** Of which: reading the machine values from KV. */
  kvReadMs: number;
  /** Of which: decoding them (warm JIT: a lower bound). */
  decodeMs: number;
  /** startKit after load: fleet, fences, interrupted machines, first commit. */
  kitMs: number;
  /** gRPC listener: descriptors, service, bind. */
  grpcMs: number;
}

export interface SizeResult {
  machines: number;
  date: string;
  loadAverage: number;
  listBytes: number;
  firstBootMs: number;
  idleFreshMiB: number;
  idleRestartedMiB: number;
  peakBootMiB: number;
  peakListsMiB: number;
  /** Peak while 16 clients drive lifecycles. */
  peakLoadMiB: number;
  /** Peak while 16 clients drive lifecycles and one more Lists in a loop. */
  peakMixedMiB: number;
  peakRestartMiB: number;
  lists: number;
  listP50Ms: number;
  listP99Ms: number;
  listMixedP99Ms: number;
  /** Provider CPU time per full List (user + system): steadier than latency on a busy machine. */
  listCpuMs: number;
  getCpuUs: number;
  getP50Ms: number;
  getP99Ms: number;
  createP50Ms: number;
  createP99Ms: number;
  transitionsPerSec: number;
  mixedTransitionsPerSec: number;
  retries: number;
  cpuPerTransitionUs: number;
  restartMs: number[];
  phases: RestartPhases;
}

const BEGIN = "<!-- fleet-scale:begin -->";
const END = "<!-- fleet-scale:end -->";

function ms(x: number): string {
  return x < 10 ? x.toFixed(1) : x.toFixed(0);
}

function machineLine(): string {
  const cpu = cpus()[0]?.model ?? "unknown CPU";
  return `${cpu}, ${navigator.hardwareConcurrency} cores, Deno ${Deno.version.deno} ` +
    `(V8 ${Deno.version.v8}), ${Deno.build.os}`;
}

function row(r: SizeResult): string {
  const restart = r.restartMs[r.restartMs.length >> 1];
  return [
    r.machines.toLocaleString("en-US"),
    (r.listBytes / 1024 / 1024).toFixed(1),
    `${r.idleFreshMiB} / ${r.idleRestartedMiB}`,
    `${r.peakListsMiB}`,
    `${r.peakLoadMiB} / ${r.peakMixedMiB}`,
    `${Math.max(r.peakBootMiB, r.peakListsMiB, r.peakLoadMiB, r.peakMixedMiB, r.peakRestartMiB)}`,
    `${ms(r.listP50Ms)} / ${ms(r.listP99Ms)}`,
    ms(r.listCpuMs),
    ms(r.getP99Ms),
    ms(r.createP99Ms),
    r.transitionsPerSec.toLocaleString("en-US"),
    `${r.cpuPerTransitionUs}`,
    `${Math.round(restart)}`,
    r.loadAverage.toFixed(1),
    r.date,
  ].join(" | ");
}

function phaseRow(r: SizeResult): string {
  const p = r.phases;
  return [
    r.machines.toLocaleString("en-US"),
    p.processMs,
    p.configMs,
    p.openMs,
    `${p.loadMs} (${p.kvReadMs} + ${p.decodeMs})`,
    p.kitMs,
    p.grpcMs,
    Math.round(p.processMs + p.configMs + p.openMs + p.loadMs + p.kitMs + p.grpcMs),
    r.restartMs[r.restartMs.length >> 1],
  ].map(String).join(" | ");
}

/** `md` with its fleet-scale section replaced (or just the section when `md` has none). */
export function renderResults(md: string, results: readonly SizeResult[]): string {
  const lists = results[0]?.lists ?? 120;
  const section = [
    BEGIN,
    "",
    `Machine: ${machineLine()}. Provider: \`main.ts --use-fake-backend --state=…\` as the harness starts it.`,
    "",
    `| machines | List MB | idle RSS MiB (fresh / restarted) | peak RSS MiB, ${lists} Lists | peak RSS MiB, 16 clients / + Lists | peak RSS MiB, whole run | List p50 / p99 ms | provider CPU ms / List | Get p99 ms | Create-ack p99 ms | durable transitions/s (16 clients) | provider CPU µs / transition | restart to accept ms | load avg | date |`,
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ...results.map((r) => `| ${row(r)} |`),
    "",
    "Restart on an existing state, by phase (ms, bench/restart_phases.ts; in-process phases in one fresh process):",
    "",
    "| machines | Deno start + modules | flags + slots | open KV | load (KV read + decode) | kit boot after load | gRPC listener | sum | measured restart |",
    "|---|---|---|---|---|---|---|---|---|",
    ...results.map((r) => `| ${phaseRow(r)} |`),
    "",
    END,
  ].join("\n");
  const a = md.indexOf(BEGIN);
  const b = md.indexOf(END);
  if (a < 0 || b < 0) return md === "" ? section + "\n" : `${md.trimEnd()}\n\n${section}\n`;
  return md.slice(0, a) + section + md.slice(b + END.length);
}
