// End to end over real gRPC: a provider process on the fake backend and a
// grpc-js client in this process (its decode included). For each fleet size
// it runs the certification's B1106 latency shape — 120 Gets of one machine,
// 120 full Lists, 60 Creates on distinct Speculative machines (the ack only,
// not the transition) — plus capped Lists, and reports p50 and nearest-rank
// p99 next to the B1106 ceilings (Get and Create ≤ 250 ms, List ≤ 2 s).
// These figures live here, not in tests: tests never assert absolute times.
// Prints a Markdown table.

import { fakeProviderArgs, ProviderClient, startProvider } from "../tests/harness/mod.ts";
// Nearest-rank, as B1106 computes it.
import { percentile as pct, timeCalls } from "./stats.ts";

const ROUNDS = 120;
const CREATES = 60;
const CEILING: Record<string, string> = {
  "List (full)": "2 s",
  "Get": "250 ms",
  "Create (ack)": "250 ms",
};

console.log("| fleet | call | calls | p50 | p99 | B1106 ceiling |\n|---|---|---|---|---|---|");
for (const seed of [4_000, 10_000, 20_000]) {
  const p = await startProvider({ args: fakeProviderArgs({ seed }) });
  const c = new ProviderClient(p.addr, { maxReceiveBytes: 256 * 1024 * 1024 });
  try {
    const id = `certify/OnDemand/pve.large/pve-a/000`;
    const spec = (await c.list({ states: [1] })).machines.map((m) => m.id).filter((x) => x !== id);
    const calls: [string, number, (i: number) => Promise<unknown>][] = [
      ["List (full)", ROUNDS, () => c.list({})],
      ["List SPECULATIVE max 1", ROUNDS, () => c.list({ states: [1], max_results: 1 })],
      ["Get", ROUNDS, () => c.get({ id })],
      ["Create (ack)", CREATES, (i) => c.create({ machine_id: spec[i] })],
    ];
    for (const [name, n, call] of calls) {
      if (name !== "Create (ack)") await call(0); // warm
      const t = await timeCalls(n, call);
      console.log(
        `| ${seed} | ${name} | ${n} | ${pct(t, 0.5).toFixed(1)} ms | ${
          pct(t, 0.99).toFixed(1)
        } ms | ${CEILING[name] ?? "–"} |`,
      );
    }
  } finally {
    c.close();
    await p.stop();
  }
}
