// Standalone simulator for manual use:
//   deno run --allow-all tests/pvesim/main.ts --port 8006 [--nodes pve1,pve2] [--secret S]
//     [--token-id ID] [--legacy-errors] [--audit-hidden] [--auth-fail-delay MS] [--slow]
//     [--time-scale F]
// --slow uses real-PVE timings (REAL_TIMING: a 3 minute clone, agent boot 25 s, RRD lag 10 s);
// --time-scale F the same multiplied by F.

import { REAL_TIMING, scaledTiming, startSimulator } from "./mod.ts";
import type { SimOptions } from "./types.ts";

function arg(name: string): string | undefined {
  const i = Deno.args.indexOf(`--${name}`);
  if (i >= 0) return Deno.args[i + 1];
  const eq = Deno.args.find((a) => a.startsWith(`--${name}=`));
  return eq?.slice(name.length + 3);
}
const flag = (name: string) => Deno.args.includes(`--${name}`);

const opts: SimOptions = {
  port: Number(arg("port") ?? 8006),
  host: arg("host") ?? "127.0.0.1",
  nodes: arg("nodes")?.split(","),
  tokenId: arg("token-id"),
  tokenSecret: arg("secret"),
  legacyErrors: flag("legacy-errors"),
  auditHidden: flag("audit-hidden"),
  authFailDelayMs: Number(arg("auth-fail-delay") ?? 0),
  certDir: arg("cert-dir"),
};
if (flag("slow")) opts.timing = REAL_TIMING;
if (arg("time-scale") !== undefined) opts.timing = scaledTiming(Number(arg("time-scale")));

const sim = await startSimulator(opts);
console.log(`pvesim listening on ${sim.url}`);
console.log(`token id:     ${sim.tokenId}`);
console.log(`token secret: ${sim.tokenSecret}`);
console.log(`CA file:      ${sim.caFile}`);
console.log(`fingerprint:  ${sim.fingerprint}`);
Deno.addSignalListener("SIGINT", async () => {
  await sim.close();
  Deno.exit(0);
});
