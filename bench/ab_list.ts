// A/B end to end: this checkout's provider against another checkout's (for
// example the commit before a listener change), both running side by side,
// with every call alternating between them so both see the same machine
// load. Noise on a shared machine swamps differences of a few percent
// between runs made one after the other; alternation does not.
//
//   git archive <commit> | tar -x -C /tmp/base
//   deno run --allow-all bench/ab_list.ts /tmp/base [--tls] [fleet] [rounds]
//
// Prints a Markdown table: p50, mean and p99 of full Lists and Gets.

import * as grpc from "@grpc/grpc-js";
import { DEFAULT_PROVIDER_CMD, fakeProviderArgs, startProvider } from "../tests/harness/mod.ts";
import { RawClient, tlsCreds } from "../tests/server/helpers.ts";
import { makeTestPki } from "../tests/pvesim/certs.ts";

const positional = Deno.args.filter((a) => !a.startsWith("--"));
const [other, fleetArg, roundsArg] = positional;
if (!other) throw new Error("usage: ab_list.ts <other checkout> [--tls] [fleet] [rounds]");
const tls = Deno.args.includes("--tls");
const fleet = Number(fleetArg ?? 20_000);
const rounds = Number(roundsArg ?? 100);

const args = fakeProviderArgs({ seed: fleet });
let creds = grpc.credentials.createInsecure();
if (tls) {
  const pki = await makeTestPki();
  args.push(`--tls-cert=${pki.server.certFile}`, `--tls-key=${pki.server.keyFile}`);
  creds = tlsCreds(pki.ca.certPem);
}
const otherCmd = DEFAULT_PROVIDER_CMD.map((a) => a.endsWith("/main.ts") ? `${other}/main.ts` : a);
const sides = {
  this: await startProvider({ args }),
  other: await startProvider({ args, cmd: otherCmd }),
};
const clients = Object.fromEntries(
  Object.entries(sides).map(([k, p]) => [
    k,
    new RawClient(`localhost:${p.port}`, creds, { "grpc.max_receive_message_length": -1 }),
  ]),
) as Record<keyof typeof sides, RawClient>;

function stats(t: number[]): string {
  const s = [...t].sort((a, b) => a - b);
  const at = (p: number) => s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)];
  const mean = s.reduce((a, b) => a + b, 0) / s.length;
  return `${at(0.5).toFixed(1)} ms | ${mean.toFixed(1)} ms | ${at(0.99).toFixed(1)} ms`;
}

try {
  const first = await clients.this.call("List", { max_results: 1 });
  if (!first.ok) throw new Error(first.details);
  const id = (first.value.machines as { id: string }[])[0].id;
  const calls: [string, string, Record<string, unknown>][] = [
    ["List (full)", "List", {}],
    ["Get", "Get", { id }],
  ];
  console.log(`| ${fleet} machines${tls ? ", TLS" : ""} | checkout | p50 | mean | p99 |`);
  console.log("|---|---|---|---|---|");
  for (const [name, method, req] of calls) {
    const times = { this: [] as number[], other: [] as number[] };
    for (let i = -5; i < rounds; i++) {
      const order = (i % 2 ? ["this", "other"] : ["other", "this"]) as (keyof typeof sides)[];
      for (const k of order) {
        const t0 = performance.now();
        const r = await clients[k].call(method, req, 60_000);
        if (!r.ok) throw new Error(`${k} ${method}: ${r.details}`);
        if (i >= 0) times[k].push(performance.now() - t0);
      }
    }
    console.log(`| ${name} | this | ${stats(times.this)} |`);
    console.log(`| ${name} | ${other} | ${stats(times.other)} |`);
  }
} finally {
  for (const c of Object.values(clients)) c.close();
  for (const p of Object.values(sides)) await p.stop();
}
