// What the machines-by-state gauge (src/server/metrics.ts) costs at fleet
// scale: a kit over 100,000 machines booted with and without the metrics
// observer (every record counted once at boot), one record change, and a
// scrape of the registry. Figures are recorded in bench/RESULTS.md.

import { createFakeBackend } from "../src/fake/backend.ts";
import { startKit } from "../src/kit/kit.ts";
import { createMemoryStore } from "../src/kit/store.ts";
import type { Slot } from "../src/config/types.ts";
import { State } from "../src/kit/model.ts";
import type { MachineRecord } from "../src/kit/model.ts";
import { createMetrics } from "../src/server/metrics.ts";

const N = 100_000;
const ZONES = ["pve1", "pve2", "pve3", "pve4"];

function slots(n: number): Slot[] {
  return Array.from({ length: n }, (_, i) => ({
    id: `bench/OnDemand/pve.large/${ZONES[i % 4]}/${String(i).padStart(6, "0")}`,
    instanceType: "pve.large",
    zone: ZONES[i % 4],
    pricePerHour: 0.0368,
    resources: [["cpu", "1"], ["memory", "2Gi"]],
    allocatable: [["cpu", "8"], ["memory", "16Gi"]],
    labels: [],
  }));
}

const fleet = slots(N);
const boot = (observed: boolean) =>
  startKit({
    provider: "bench",
    backend: createFakeBackend({ delayMs: 0 }),
    store: createMemoryStore(),
    slots: fleet,
    observer: observed ? createMetrics().fleet : undefined,
  });

Deno.bench(
  "boot 100k machines, no observer",
  { group: "boot", baseline: true, n: 12 },
  async () => {
    await (await boot(false)).close();
  },
);

Deno.bench("boot 100k machines, counted by the gauge", { group: "boot", n: 12 }, async () => {
  await (await boot(true)).close();
});

const metrics = createMetrics();
const kit = await startKit({
  provider: "bench",
  backend: createFakeBackend({ delayMs: 0 }),
  store: createMemoryStore(),
  slots: fleet,
  observer: metrics.fleet,
});
const some = (await kit.list({ states: [], maxResults: 1 })).machines[0];
const idle: MachineRecord = { ...some, state: State.Idle };

Deno.bench("one record change counted (SPECULATIVE → IDLE and back)", { group: "change" }, () => {
  metrics.fleet.machineChanged!(some, idle);
  metrics.fleet.machineChanged!(idle, some);
});

Deno.bench("scrape /metrics of a 100k fleet in 4 zones", { group: "scrape" }, async () => {
  await metrics.scrape();
});
