// Files of format 1, written before packed bases (or before this version's
// first write packed one): no ["meta", "base"], one key per machine
// (["m", id], a value as in the overlay) and per fence mark (["f", shard,
// machine]), plus any overlay written on top. Its rules:
//
// - They load as the base, key by key; every such key counts as an overlay
//   key, so the first packing comes soon and moves the file to format 2.
// - Once a base is in use, the per-record keys are deleted with what else
//   it replaced.
// - A file with a revision but no format marker predates the marker and is
//   complete (the marker was never part of a write cut short): it gets the
//   format-1 marker.

import type { ChunkTable } from "./kv_chunks.ts";
import { deleteAll, mustCommit } from "./kv_commit.ts";
import { FORMAT_KEY, FORMAT_NO_BASE, LEGACY_FENCES, LEGACY_MACHINES } from "./kv_layout.ts";
import type { FenceValue, MachineValue } from "./kv_layout.ts";
import { fenceEntry, putFenceIn, readValue } from "./kv_overlay.ts";
import type { StateMaps } from "./kv_overlay.ts";

/** Reads the per-record keys into `state`; returns how many there were. */
export async function readPerRecordKeys(
  kv: Deno.Kv,
  state: StateMaps,
  chunks: ChunkTable,
): Promise<number> {
  let keys = 0;
  for await (const e of kv.list<MachineValue>({ prefix: LEGACY_MACHINES })) {
    const id = e.key[1] as string;
    state.machines.set(id, await readValue(chunks, id, e.value, -1));
    keys++;
  }
  for await (const e of kv.list<FenceValue>({ prefix: LEGACY_FENCES })) {
    putFenceIn(state, fenceEntry(e.key[1], e.key[2], e.value));
    keys++;
  }
  return keys;
}

export async function deletePerRecordKeys(kv: Deno.Kv): Promise<void> {
  await deleteAll(kv, LEGACY_MACHINES);
  await deleteAll(kv, LEGACY_FENCES);
}

/** Marks a complete file written before the marker existed. */
export async function markUnmarked(kv: Deno.Kv): Promise<void> {
  await mustCommit(kv.atomic().set(FORMAT_KEY, FORMAT_NO_BASE));
}
