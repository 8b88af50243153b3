// Get latency against its floor: the provider (fake backend, Deno KV state,
// 20,000 machines by default) and bench/get_floor_echo.ts (grpc-js on Deno
// answering the same bytes with nothing behind them), each driven by the same
// clients one call at a time: ghz, a Go gRPC client as BigFleet's own is
// (when installed: `go install github.com/bojand/ghz/cmd/ghz@latest`), and
// the grpc-js client the other benches use. Rounds alternate between the two
// servers so drift in machine load hits both. Prints a markdown table.
//
//   deno task bench:get [machines]

import { fakeProviderArgs, freePort, REPO_ROOT, startProvider } from "../tests/harness/mod.ts";
import { RawClient, readList } from "../tests/harness/raw_client.ts";
import { percentile, timeCalls } from "./stats.ts";
import { loadavg } from "node:os";
import { Buffer } from "node:buffer";

const SEED = Number(Deno.args[0] ?? 20_000);
const CALLS = 2_000;
const ROUNDS = 3;
const PROTO = `${REPO_ROOT}proto/bigfleet/v1alpha1/provider.proto`;

function findGhz(): string | null {
  const home = Deno.env.get("HOME") ?? "";
  const dirs = [...(Deno.env.get("PATH") ?? "").split(":"), `${home}/go/bin`];
  for (const d of dirs) {
    try {
      if (Deno.statSync(`${d}/ghz`).isFile) return `${d}/ghz`;
    } catch { /* not here */ }
  }
  return null;
}

/** p50 / p99 in ms of CALLS sequential Gets by ghz, over one connection. */
async function ghzGets(ghz: string, addr: string, id: string): Promise<[number, number]> {
  const out = await new Deno.Command(ghz, {
    args: [
      "--insecure",
      "--proto",
      PROTO,
      "--call",
      "bigfleet.v1alpha1.CapacityProvider.Get",
      "-d",
      JSON.stringify({ id }),
      "-c",
      "1",
      "-n",
      String(CALLS),
      "--format=json",
      addr,
    ],
    stderr: "inherit",
  }).output();
  const report = JSON.parse(new TextDecoder().decode(out.stdout));
  if (report.statusCodeDistribution?.OK !== CALLS) throw new Error("ghz: not every Get was OK");
  const at = (p: number) =>
    report.latencyDistribution.find((d: { percentage: number }) => d.percentage === p).latency /
    1e6;
  return [at(50), at(99)];
}

async function grpcJsGets(addr: string, id: string): Promise<[number, number]> {
  const c = new RawClient(addr);
  await c.get(id);
  const t = await timeCalls(CALLS, () => c.get(id));
  c.close();
  return [percentile(t, 0.5), percentile(t, 0.99)];
}

const dir = await Deno.makeTempDir({ prefix: "bench-get-" });
const provider = await startProvider({
  args: fakeProviderArgs({ seed: SEED, state: `${dir}/state.kv` }),
  readyTimeoutMs: 120_000,
});
const probe = new RawClient(provider.addr);
const id = readList(await probe.list())[Math.floor(SEED / 2)].id;
const answer = await probe.get(id);
probe.close();

const echoPort = freePort();
const echo = new Deno.Command(Deno.execPath(), {
  args: [
    "run",
    "--allow-net",
    "--allow-env",
    `--config=${REPO_ROOT}deno.json`,
    new URL("./get_floor_echo.ts", import.meta.url).pathname,
    String(echoPort),
    Buffer.from(answer).toString("base64"),
  ],
  stdout: "piped",
}).spawn();
const reader = echo.stdout.pipeThrough(new TextDecoderStream()).getReader();
for (;;) {
  const { done, value } = await reader.read();
  if (value?.includes("ready")) break;
  if (done) throw new Error("bench/get_floor_echo.ts exited before it was ready");
}
reader.releaseLock();
const echoAddr = `127.0.0.1:${echoPort}`;

const ghz = findGhz();
type Client = [string, (addr: string) => Promise<[number, number]>];
const clients: Client[] = [["grpc-js (Deno)", (a) => grpcJsGets(a, id)]];
if (ghz) clients.unshift(["ghz (Go)", (a) => ghzGets(ghz, a, id)]);
const rows: string[] = [];
try {
  for (const [name, run] of clients) {
    const got: Record<string, [number, number][]> = { provider: [], echo: [] };
    for (let r = 0; r < ROUNDS; r++) {
      got.provider.push(await run(provider.addr));
      got.echo.push(await run(echoAddr));
    }
    for (const [server, runs] of Object.entries(got)) {
      const fmt = (i: 0 | 1) => runs.map((x) => x[i].toFixed(2)).join(" / ");
      rows.push(`| ${name} | ${server} | ${fmt(0)} | ${fmt(1)} |`);
    }
  }
} finally {
  echo.kill();
  await echo.status;
  await provider.stop();
  await Deno.remove(dir, { recursive: true });
}
console.log(
  `Get of one machine on a ${SEED}-machine fleet, ${CALLS} sequential calls per round, ` +
    `${ROUNDS} rounds alternating; load average ${loadavg()[0].toFixed(1)}, ${
      new Date().toISOString().slice(0, 10)
    }\n`,
);
console.log("| client | server | p50 ms (per round) | p99 ms (per round) |");
console.log("| --- | --- | --- | --- |");
for (const r of rows) console.log(r);
