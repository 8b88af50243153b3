// End to end over real gRPC: a provider process with a large fleet, and a
// grpc-js client in this process (decode included) timing full Lists, capped
// Lists and Gets. The certification's scale lane wants p99 List ≤ 2 s and
// Get/Create ≤ 250 ms. Prints a Markdown table.

import { fakeProviderArgs, ProviderClient, startProvider } from "../tests/harness/mod.ts";

const ROUNDS = 30;

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)];
}

console.log("| fleet | call | p50 | p99 |\n|---|---|---|---|");
for (const seed of [10_000, 20_000]) {
  const p = await startProvider({ args: fakeProviderArgs({ seed }) });
  const c = new ProviderClient(p.addr, { maxReceiveBytes: 256 * 1024 * 1024 });
  try {
    const calls: [string, () => Promise<unknown>][] = [
      ["List (full)", () => c.list({})],
      ["List SPECULATIVE max 1", () => c.list({ states: [1], max_results: 1 })],
      ["Get", () => c.get({ id: `certify/OnDemand/pve.large/pve-a/000` })],
    ];
    for (const [name, call] of calls) {
      await call();
      const t: number[] = [];
      for (let i = 0; i < ROUNDS; i++) {
        const t0 = performance.now();
        await call();
        t.push(performance.now() - t0);
      }
      t.sort((a, b) => a - b);
      console.log(
        `| ${seed} | ${name} | ${pct(t, 0.5).toFixed(1)} ms | ${pct(t, 0.99).toFixed(1)} ms |`,
      );
    }
  } finally {
    c.close();
    await p.stop();
  }
}
