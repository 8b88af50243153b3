// Where a restart on an existing state spends its time, phase by phase, in a
// fresh process (cold JIT, as a real restart): Deno start plus module loading,
// flag parsing with slot expansion, opening Deno KV, reading every record,
// decoding them, the rest of the kit's boot, and the gRPC listener. Run by
// bench/fleet_scale.ts on the state its provider left behind; prints JSON.
//
//   deno run --allow-all --unstable-kv bench/restart_phases.ts <state.kv> <seed>

import { loadConfig } from "../src/config/load.ts";
import { createFakeBackend } from "../src/fake/backend.ts";
import { startKit } from "../src/kit/kit.ts";
import { openKvStore } from "../src/store/kv_store.ts";
import type { StateStore } from "../src/kit/store.ts";
import { readBase } from "../src/store/kv_base.ts";
import type { BaseRef } from "../src/store/kv_base.ts";
import { startGrpcServer } from "../src/server/grpc.ts";
import { providerCommand } from "../tests/harness/mod.ts";
import type { RestartPhases } from "./fleet_report.ts";

const [statePath, seedArg] = Deno.args;
const seed = Number(seedArg);
const now = () => performance.now();

// Deno start + module graph of main.ts: spawn until a config error makes it exit.
async function processStartMs(): Promise<number> {
  const [cmd, ...base] = providerCommand();
  const runs: number[] = [];
  for (let i = 0; i < 3; i++) {
    const t0 = now();
    await new Deno.Command(cmd, { args: [...base, "--seed-count=x"], stderr: "null" }).output();
    runs.push(now() - t0);
  }
  return runs.sort((a, b) => a - b)[1];
}

const processMs = await processStartMs();

let t = now();
const config = await loadConfig([
  "--provider=certify",
  "--use-fake-backend",
  `--seed-count=${seed}`,
  "--metrics-addr=",
  `--state=${statePath}`,
]);
// The config makes the slots when they are read: that read is this phase's too.
const slots = config.slots;
const configMs = now() - t;

// The boot path of src/app.ts, phase by phase, with the store's load timed on its own.
t = now();
const store = await openKvStore(statePath);
const openMs = now() - t;
let loadMs = 0;
// The store itself, its load timed (a spread would freeze its progress counters).
const timedStore: StateStore = Object.create(store, {
  load: {
    async value() {
      const t0 = now();
      const saved = await store.load();
      loadMs = now() - t0;
      return saved;
    },
  },
});
t = now();
const kit = await startKit({
  provider: config.provider,
  backend: createFakeBackend({ delayMs: 0 }),
  store: timedStore,
  slots,
});
const kitMs = now() - t - loadMs;
t = now();
const server = await startGrpcServer({
  kit,
  provider: config.provider,
  host: "127.0.0.1",
  port: 0,
  tls: null,
  reflection: false,
  observer: { rpc() {}, panic() {} },
});
const grpcMs = now() - t;
await server.shutdown(0);
await kit.close();

// Reading apart from decoding: a raw pass over the packed base and the
// overlay (after the boot above, so the decoder is already compiled: a lower
// bound), then decoding the base alone.
const kv = await Deno.openKv(statePath);
const ref = (await kv.get<BaseRef>(["meta", "base"])).value;
t = now();
for (const prefix of [ref ? ["b", ref.id] : ["m"], ["o"], ["of"]]) {
  for await (const _ of kv.list({ prefix })) { /* read only */ }
}
const kvReadMs = now() - t;
t = now();
if (ref) await readBase(kv, ref, () => {}, () => {});
const decodeMs = Math.max(0, now() - t - kvReadMs);
kv.close();

const round = (x: number) => Math.round(x * 10) / 10;
const phases: RestartPhases = {
  processMs: round(processMs),
  configMs: round(configMs),
  openMs: round(openMs),
  loadMs: round(loadMs),
  kvReadMs: round(kvReadMs),
  decodeMs: round(decodeMs),
  kitMs: round(kitMs),
  grpcMs: round(grpcMs),
};
console.log(JSON.stringify(phases));
