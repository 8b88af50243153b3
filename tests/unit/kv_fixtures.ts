// Shared by the state store tests: a machine record, a scratch state file,
// and what a fresh open of a file holds.

import { openKvStore } from "../../src/store/kv_store.ts";
import { State } from "../../src/kit/model.ts";
import type { MachineRecord } from "../../src/kit/model.ts";
import type { PersistedState } from "../../src/kit/store.ts";

export function machine(id: string, extra: Partial<MachineRecord> = {}): MachineRecord {
  return {
    id,
    state: State.Configured,
    hostRef: "pve-a/101",
    instanceType: "pve.large",
    zone: "pve-a",
    capacityType: 3,
    pricePerHour: 0.0368,
    interruptionProbability: 0,
    resources: [["cpu", "1"], ["memory", "2Gi"]],
    allocatable: [["cpu", "8"], ["memory", "16Gi"]],
    labels: [],
    cluster: "c1",
    shardMetadata: [],
    lastError: "",
    ops: { create: "op-1", configure: "op-2" },
    orphan: false,
    ...extra,
  };
}

export async function withStore(fn: (path: string) => Promise<void>) {
  const dir = await Deno.makeTempDir();
  try {
    await fn(`${dir}/state.kv`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** What a fresh open of the state loads. */
export async function reload(path: string): Promise<PersistedState | null> {
  const s = await openKvStore(path);
  try {
    return await s.load();
  } finally {
    await s.close();
  }
}

export async function has(path: string, key: Deno.KvKey): Promise<boolean> {
  const kv = await Deno.openKv(path);
  const found = (await kv.get(key)).versionstamp !== null;
  kv.close();
  return found;
}

export async function keys(path: string, prefix: Deno.KvKey = []): Promise<Deno.KvKey[]> {
  const kv = await Deno.openKv(path);
  const out: Deno.KvKey[] = [];
  for await (const e of kv.list({ prefix })) out.push(e.key);
  kv.close();
  return out;
}

export function byId(a: MachineRecord, b: MachineRecord): number {
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}
