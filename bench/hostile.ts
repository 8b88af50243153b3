// Honest Gets under hostile traffic, in absolute figures: the scenario of
// tests/server/overload_test.ts (1,000 idle connections, slow-loris
// prefaces, a stalled 5 MiB upload, 10,000 unread Get streams, an unread
// List flood) against one provider, while Gets alternate between it and an
// identical quiet provider. Prints a Markdown table.

import { fakeProviderArgs, startProvider } from "../tests/harness/mod.ts";
import {
  alternateGets,
  honestClient,
  percentile,
  rssMib,
  rssSampler,
  startHostileMix,
} from "../tests/server/overload_scenario.ts";

const GETS = 1_000;

const args = fakeProviderArgs({ seed: 300 });
const [target, control] = await Promise.all([startProvider({ args }), startProvider({ args })]);
const sides = [await honestClient(target), await honestClient(control)];
try {
  await alternateGets(sides, 100);
  for (const s of sides) s.times = [];
  await alternateGets(sides, GETS);
  const quiet = sides.map((s) => [...s.times].sort((a, b) => a - b));
  for (const s of sides) s.times = [];

  const before = await rssMib(target.pid);
  const rss = rssSampler(target.pid);
  const mix = await startHostileMix(target.port);
  await alternateGets(sides, GETS);
  await rss.stop();
  mix.close();
  const hostile = sides.map((s) => [...s.times].sort((a, b) => a - b));

  const row = (name: string, t: number[]) =>
    `| ${name} | ${percentile(t, 0.5).toFixed(2)} ms | ${percentile(t, 0.99).toFixed(2)} ms | ${
      t.at(-1)!.toFixed(1)
    } ms |`;
  console.log(`| Gets (${GETS} each) | p50 | p99 | max |\n|---|---|---|---|`);
  console.log(row("no hostile traffic (provider A)", quiet[0]));
  console.log(row("no hostile traffic (provider B)", quiet[1]));
  console.log(row("hostile mix against A: A", hostile[0]));
  console.log(row("hostile mix against A: B (quiet)", hostile[1]));
  console.log(
    `\nRSS of A: ${before.toFixed(0)} MiB before the mix, ${
      rss.max.toFixed(0)
    } MiB at most during it.`,
  );
} finally {
  for (const s of sides) s.client.close();
  await target.stop();
  await control.stop();
}
