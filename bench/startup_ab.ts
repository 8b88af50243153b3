// Spawn to first accept of two provider builds, alternating run by run so a
// shared host's load falls on both alike: this checkout against another
// (`BFCONF_PROVIDER_CMD`-style command in BENCH_OTHER_CMD), each with a fresh
// Deno KV state file and 20,000 slots. Prints both medians.
//
//   BENCH_OTHER_CMD="deno run … /tmp/other/main.ts" deno run -A bench/startup_ab.ts [pairs=15]

import { DEFAULT_PROVIDER_CMD } from "../tests/harness/mod.ts";
import { msToAccept } from "./accept.ts";

const other = Deno.env.get("BENCH_OTHER_CMD")?.split(" ").filter((s) => s !== "");
if (!other) {
  console.error("BENCH_OTHER_CMD must name the other build's command (see the header)");
  Deno.exit(2);
}
const pairs = Number(Deno.args[0] ?? 15);
const dir = await Deno.makeTempDir();
let port = 19_800;
let n = 0;

function once(cmd: string[]): Promise<number> {
  const args = ["--use-fake-backend", "--metrics-addr=", "--seed-count=20000"];
  return msToAccept(cmd, [...args, `--state=${dir}/s${n++}.kv`], port++);
}

const mine: number[] = [];
const theirs: number[] = [];
for (let i = 0; i < pairs; i++) {
  mine.push(await once(DEFAULT_PROVIDER_CMD));
  theirs.push(await once(other));
}
const median = (x: number[]) => [...x].sort((a, b) => a - b)[x.length >> 1].toFixed(0);
console.log(
  `this checkout ${median(mine)} ms, the other ${median(theirs)} ms ` +
    `(medians of ${pairs} alternating pairs, seed 20000, fresh KV state)`,
);
await Deno.remove(dir, { recursive: true });
