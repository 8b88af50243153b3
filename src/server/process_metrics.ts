// Process metrics that are true under Deno. prom-client's default collectors
// read /proc/self/{status,fd}, which Deno opens only with --allow-all: with
// the provider's permissions those gauges would sit at 0. They are replaced
// (resident memory from Deno.memoryUsage) or dropped rather than left lying.
// Deno's perf_hooks.monitorEventLoopDelay is a stub (microsecond readings
// while the loop is blocked for 200 ms), so the histogram-derived lag family
// is dropped too; nodejs_eventloop_lag_seconds, measured at scrape, stays.

import { collectDefaultMetrics, Gauge } from "prom-client";
import type { Registry } from "prom-client";

const PROC_SELF_GAUGES = [
  "process_resident_memory_bytes",
  "process_virtual_memory_bytes",
  "process_heap_bytes",
  "process_open_fds",
  "process_max_fds",
];

const LAG_FAMILY = ["min", "max", "mean", "stddev", "p50", "p90", "p99"].map((s) =>
  `nodejs_eventloop_lag_${s}_seconds`
);

export function registerProcessMetrics(registry: Registry): void {
  collectDefaultMetrics({ register: registry });
  for (const name of LAG_FAMILY) registry.removeSingleMetric(name);
  if (Deno.build.os !== "linux" || canReadProcSelf()) return;
  for (const name of PROC_SELF_GAUGES) registry.removeSingleMetric(name);
  new Gauge({
    name: "process_resident_memory_bytes",
    help: "Resident memory size in bytes.",
    registers: [registry],
    collect() {
      this.set(Deno.memoryUsage().rss);
    },
  });
}

function canReadProcSelf(): boolean {
  try {
    Deno.readTextFileSync("/proc/self/status");
    return true;
  } catch {
    return false;
  }
}
