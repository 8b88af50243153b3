// Spawn to serving: how long the provider process takes until its gRPC port
// accepts (the certification runner's readiness test), for the default seed
// and a 20,000-slot fleet, in memory and with a fresh Deno KV state file.
// A plain script rather than Deno.bench: the bench timer does not account for
// time spent waiting on a child process. Prints a Markdown table.

import { providerCommand } from "../tests/harness/mod.ts";
import { msToAccept } from "./accept.ts";

const RUNS = 7;
let port = 19_700;

function bootOnce(extra: string[]): Promise<number> {
  return msToAccept(providerCommand(), ["--use-fake-backend", "--metrics-addr=", ...extra], port++);
}

const dir = await Deno.makeTempDir();
let n = 0;
const cases: [string, () => string[]][] = [
  ["seed 32, in memory", () => []],
  ["seed 32, fresh KV state", () => [`--state=${dir}/s${n++}.kv`]],
  ["seed 20000, in memory", () => ["--seed-count=20000"]],
  ["seed 20000, fresh KV state", () => ["--seed-count=20000", `--state=${dir}/s${n++}.kv`]],
];
console.log("| spawn to serving | median | min | max |\n|---|---|---|---|");
for (const [name, args] of cases) {
  const t: number[] = [];
  for (let i = 0; i < RUNS; i++) t.push(await bootOnce(args()));
  t.sort((a, b) => a - b);
  const ms = (x: number) => `${x.toFixed(0)} ms`;
  console.log(`| ${name} | ${ms(t[RUNS >> 1])} | ${ms(t[0])} | ${ms(t[RUNS - 1])} |`);
}
await Deno.remove(dir, { recursive: true });
