// Spawn to serving: how long the provider process takes until its gRPC port
// accepts (the certification runner's readiness test), for the default seed
// and a 20,000-slot fleet, in memory and with a fresh Deno KV state file.
// A plain script rather than Deno.bench: the bench timer does not account for
// time spent waiting on a child process. Prints a Markdown table.

import { providerCommand } from "../tests/harness/mod.ts";

const RUNS = 7;
let port = 19_700;

async function bootOnce(extra: string[]): Promise<number> {
  const p = port++;
  const t0 = performance.now();
  const [cmd, ...base] = providerCommand();
  const child = new Deno.Command(cmd, {
    args: [
      ...base,
      "--use-fake-backend",
      `--addr=127.0.0.1:${p}`,
      "--metrics-addr=",
      ...extra,
    ],
    stdout: "null",
    stderr: "null",
  }).spawn();
  try {
    for (;;) {
      try {
        (await Deno.connect({ hostname: "127.0.0.1", port: p })).close();
        return performance.now() - t0;
      } catch {
        await new Promise((r) => setTimeout(r, 5));
      }
    }
  } finally {
    child.kill("SIGKILL");
    await child.status;
  }
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
