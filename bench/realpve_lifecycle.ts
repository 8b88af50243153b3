// Real guests on the real PVE rig (tests/realpve/): the provider process with
// the setup-token.sh token drives ROUNDS machines one after another through
// Create → IDLE, Configure (a 3 MiB bootstrap; the kubeadm stand-in joins, the
// node is Ready at once) → CONFIGURED, Drain → IDLE, Delete → SPECULATIVE,
// timing each step from the call to the state seen by Get (100 ms polls), and
// counting the API calls the provider's token made in each step from
// pveproxy's own access log inside the rig, by kind.
//
//   deno run --allow-all bench/realpve_lifecycle.ts [ROUNDS]   (default 3; needs the rig)

import { Harness, MachineState } from "../tests/harness/mod.ts";
import { type Calls, countCalls, markCalls } from "../tests/realpve/calls.ts";
import { LANE_TYPE, laneIdentity, startLaneProvider, sweepPools } from "../tests/realpve/lane.ts";
import { SKIP } from "../tests/realpve/rig.ts";

if (SKIP !== null) {
  console.error(`cannot run: ${SKIP}`);
  Deno.exit(2);
}
const rounds = Number(Deno.args[0] ?? 3);
const load = (await Deno.readTextFile("/proc/loadavg")).split(" ").slice(0, 3).join(" ");

await sweepPools();
const id = await laneIdentity("default");
const provider = await startLaneProvider(id, { seed: rounds });
const h = new Harness(provider.addr, { seed: 1, settleMs: 300_000 });

const blob = new TextEncoder().encode(
  "kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef\nexit 0\n" +
    "#".repeat(3 * 1024 * 1024) + "\n",
);
type Step = "Create" | "Configure" | "Drain" | "Delete";
const STEPS: [Step, number, (m: string) => Promise<unknown>][] = [
  ["Create", MachineState.IDLE, (m) => h.create(m)],
  [
    "Configure",
    MachineState.CONFIGURED,
    (m) => h.configure(m, "bench", undefined, undefined, blob),
  ],
  ["Drain", MachineState.IDLE, (m) => h.drain(m, 30)],
  ["Delete", MachineState.SPECULATIVE, (m) => h.delete(m)],
];
const times: Record<Step, number[]> = { Create: [], Configure: [], Drain: [], Delete: [] };
const calls: Record<Step, Calls[]> = { Create: [], Configure: [], Drain: [], Delete: [] };

try {
  for (let i = 0; i < rounds; i++) {
    const m = `lane/OnDemand/${LANE_TYPE}/pve/${String(i).padStart(3, "0")}`;
    for (const [step, target, call] of STEPS) {
      const mark = await markCalls();
      const t0 = performance.now();
      await call(m);
      await h.mustReach(m, target, 300_000, 100);
      times[step].push((performance.now() - t0) / 1000);
      // pveproxy writes its line once the answer is sent: let the last one land.
      await new Promise((f) => setTimeout(f, 500));
      calls[step].push(await countCalls(mark, id.tokenId));
    }
    console.error(
      `round ${i + 1}/${rounds}: ${
        STEPS.map(([s]) => `${s} ${times[s][i].toFixed(1)} s`).join(", ")
      }`,
    );
  }
} finally {
  h.close();
  await provider.stop();
  await sweepPools();
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
console.log(`load average at start: ${load}; ${rounds} rounds\n`);
console.log("| step | median s | min s | max s | API calls (median) |");
console.log("| --- | --- | --- | --- | --- |");
for (const [step] of STEPS) {
  const t = times[step];
  console.log(
    `| ${step} | ${median(t).toFixed(1)} | ${Math.min(...t).toFixed(1)} | ${
      Math.max(...t).toFixed(1)
    } | ${median(calls[step].map((c) => c.total))} |`,
  );
}
console.log("\n| step | calls by kind (last round) |");
console.log("| --- | --- |");
for (const [step] of STEPS) {
  const kinds = Object.entries(calls[step].at(-1)!.byKind).sort((a, b) => b[1] - a[1]);
  console.log(`| ${step} | ${kinds.map(([k, n]) => `${n}× \`${k}\``).join(", ")} |`);
}
