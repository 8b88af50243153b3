// Child process of store_kill_test.ts: writes whole generations of a fleet
// through the real KV store, as fast as it can, until it is killed. Each
// generation rewrites every machine (a batch far over one KV commit), moves a
// fence mark, adds or deletes one machine, and every third one rewrites a
// machine too big for one KV value. Prints "opened", then "durable <gen>"
// once a generation is committed.
//
// Usage: store_writer.ts <state path> <machines per generation>

import { openKvStore } from "../../src/store/kv_store.ts";
import { slotMachine } from "../../src/kit/slot_changes.ts";
import type { MachineRecord } from "../../src/kit/model.ts";

export const BIG_ID = "big";
export const FLIP_ID = "flip";

export function genMachine(id: string, gen: number, metadataBytes = 0): MachineRecord {
  const base = slotMachine({
    id,
    instanceType: "pve.large",
    zone: "pve-a",
    pricePerHour: 0.05,
    resources: [["cpu", "8"]],
    allocatable: [["cpu", "8"]],
    labels: [["chaos", "store"]],
  });
  const md: [string, string][] = [["gen", String(gen)]];
  for (let i = 0; metadataBytes > 0 && i * 4096 < metadataBytes; i++) {
    md.push([`k${i}`, String(gen % 10).repeat(4096)]);
  }
  return { ...base, shardMetadata: md };
}

if (import.meta.main) {
  const [path, n] = Deno.args;
  const machines = Number(n);
  const store = await openKvStore(path);
  console.log("opened");
  const saved = await store.load();
  let gen = saved?.rev ?? 0;
  for (;;) {
    gen++;
    for (let i = 0; i < machines; i++) store.putMachine(genMachine(`m/${i}`, gen));
    if (gen % 3 === 0) store.putMachine(genMachine(BIG_ID, gen, 200_000));
    if (gen % 2 === 0) store.putMachine(genMachine(FLIP_ID, gen));
    else store.deleteMachine(FLIP_ID);
    store.putFence({ shardId: "s", machineId: "m/0", mark: { epoch: BigInt(gen), seq: 1n } });
    store.putRevision(gen);
    await store.durable();
    console.log(`durable ${gen}`);
  }
}
