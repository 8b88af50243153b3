// Hot paths of the provider, measured in-process: List encoding of a large
// fleet (cold and cached), Get, a lifecycle accept with its KV commit, and
// request decoding. Figures are recorded in bench/RESULTS.md.

import { createFakeBackend } from "../src/fake/backend.ts";
import { startKit } from "../src/kit/kit.ts";
import type { Kit } from "../src/kit/api.ts";
import { openKvStore } from "../src/store/kv_store.ts";
import { createMemoryStore } from "../src/kit/store.ts";
import type { StateStore } from "../src/kit/store.ts";
import type { Slot } from "../src/config/types.ts";
import { decodeConfigure, machineEncoder } from "../src/server/codec.ts";
import { encodeRevision } from "../src/kit/revision.ts";
import protobuf from "protobufjs";

function slots(n: number): Slot[] {
  return Array.from({ length: n }, (_, i) => ({
    id: `bench/OnDemand/pve.large/pve-a/${String(i).padStart(5, "0")}`,
    instanceType: "pve.large",
    zone: "pve-a",
    pricePerHour: 0.0368,
    resources: [["cpu", "1"], ["memory", "2Gi"]],
    allocatable: [["cpu", "8"], ["memory", "16Gi"]],
    labels: [],
  }));
}

async function kitOf(n: number, store: StateStore): Promise<Kit> {
  return await startKit({
    provider: "bench",
    backend: createFakeBackend({ delayMs: 0 }),
    store,
    slots: slots(n),
  });
}

const kit10k = await kitOf(10_000, createMemoryStore());
const kit20k = await kitOf(20_000, createMemoryStore());
const enc = machineEncoder("bench");

Deno.bench("List 10k machines, encoded (cached)", { group: "list", baseline: true }, async () => {
  const r = await kit10k.list({ states: [], maxResults: 0 });
  enc.list(r.machines, encodeRevision(r.revision));
});

Deno.bench("List 20k machines, encoded (cached)", { group: "list" }, async () => {
  const r = await kit20k.list({ states: [], maxResults: 0 });
  enc.list(r.machines, encodeRevision(r.revision));
});

Deno.bench("List 10k machines, encoded cold (new encoder)", { group: "list" }, async () => {
  const r = await kit10k.list({ states: [], maxResults: 0 });
  machineEncoder("bench").list(r.machines, encodeRevision(r.revision));
});

Deno.bench("List SPECULATIVE max_results=1 on 20k", { group: "pick" }, async () => {
  const r = await kit20k.list({ states: [1], maxResults: 1 });
  enc.list(r.machines, encodeRevision(r.revision));
});

Deno.bench("Get on a 20k fleet", { group: "pick" }, async () => {
  enc.machine(await kit20k.get("bench/OnDemand/pve.large/pve-a/01234"));
});

const dir = await Deno.makeTempDir();
const kvKit = await kitOf(20_000, await openKvStore(`${dir}/bench.kv`));
let next = 0;
Deno.bench(
  "Create accept + durable KV commit (20k fleet)",
  { group: "mutate", n: 2000 },
  async () => {
    const id = `bench/OnDemand/pve.large/pve-a/${String(next++ % 20_000).padStart(5, "0")}`;
    await kvKit.create({ machineId: id, token: { shardId: "", epoch: 0n, seq: 0n } }).catch(
      () => {},
    );
  },
);

const w = protobuf.Writer.create();
w.uint32(10).string("bench/OnDemand/pve.large/pve-a/00001").uint32(18).string("cluster-1");
w.uint32(26).bytes(new Uint8Array(64 * 1024));
for (let i = 0; i < 20; i++) {
  w.uint32(58).fork().uint32(10).string(`bigfleet.lucy.sh/key-${i}`).uint32(18).string("value")
    .ldelim();
}
const configureBytes = w.finish();
Deno.bench("decode Configure (64 KiB blob, 20 metadata keys)", { group: "decode" }, () => {
  decodeConfigure(configureBytes);
});
