// Packing a new base, and collecting what nothing reads any more. Its rules:
//
// - When the overlay holds max(OVERLAY_MIN, fleet / 4) keys (checked after
//   each commit and after a load's cleanup), and at a graceful close, writes
//   move to the next overlay generation and the state as handed over is
//   packed into a new base (kv_base.ts), whose pointer commit also sets the
//   format to 2. Packing costs O(fleet) once per quarter-fleet of distinct
//   changes: flat per mutation.
// - Everything in the sealed generations (a commit in flight, a redo rolled
//   forward later) was handed over before the switch, so it is in the base.
//   The base may be ahead of what is committed by whole ticks (their own
//   commits still to come): it holds their revision, and a load takes the
//   larger of it and ["meta", "rev"], so a crash right after the pointer
//   commit loads those ticks whole, revision included.
// - Until the pointer commit, the old base plus every generation since is
//   the state; after it, the old base (or the per-record keys of a format-1
//   file), the sealed generations and the chunks only they referenced are
//   deleted. A load deletes what such a cleanup, or a packing cut short,
//   left (`tidy`).
// - Only a store whose handed-over state is the whole state packs (`ready`):
//   one loaded before any change, or written from empty.
// - A packing that fails (a disk with room for lifecycle commits but not for
//   a base) leaves the overlay as it is and is not tried again for
//   PACK_RETRY_MS.
// - Garbage (superseded chunks, staged redo parts) is deleted after each
//   commit, best effort: what a full disk refuses stays listed, or is found
//   at the next load.

import { getLogger } from "@logtape/logtape";
import { writeBase } from "./kv_base.ts";
import type { BaseRef } from "./kv_base.ts";
import type { ChunkTable } from "./kv_chunks.ts";
import { commitAll, deleteAll, deletion, message, mutation } from "./kv_commit.ts";
import { baseKey, BASES, FORMAT_BASE, FORMAT_KEY } from "./kv_layout.ts";
import { deletePerRecordKeys } from "./kv_legacy.ts";
import { staleGenerationKeys } from "./kv_overlay.ts";
import type { OverlayCount, StateMaps } from "./kv_overlay.ts";
import type { RedoLog } from "./kv_redo.ts";

/** A new base is packed once the overlay holds this many keys, or a quarter of the fleet if more. */
export const OVERLAY_MIN = 1_000;
/** After a packing fails, none starts again for this long: each attempt costs O(fleet). */
const PACK_RETRY_MS = 30_000;

const log = getLogger(["bigfleet", "state"]);

/** The state as handed over: what the next base packs. */
export interface HandedState extends StateMaps {
  rev: number;
}

export interface PackingDeps {
  kv: Deno.Kv;
  chunks: ChunkTable;
  redo: RedoLog;
  overlay: OverlayCount;
  handed: HandedState;
  /** Whether packing may start: the handed state is whole and commits succeed. */
  ready(): boolean;
}

export interface Packing {
  /** The base in use; null: the per-record keys of a format-1 file are the base. */
  base: BaseRef | null;
  /** Starts packing if the overlay is full. */
  startIfFull(): void;
  /** Starts packing if the overlay holds OVERLAY_MIN keys (a graceful close). */
  startForClose(): void;
  /** After load: deletes other bases' pages and stale generations, then packs if full. */
  tidy(): void;
  /** Resolves once no packing or tidying runs. */
  idle(): Promise<void>;
  /** Deletes garbage chunks and, unless a packing asks, staged redo parts; never throws. */
  collect(stages?: boolean): Promise<void>;
}

export function createPacking(deps: PackingDeps): Packing {
  const { kv, chunks, redo, overlay, handed } = deps;
  /** A packing, or a load's cleanup, under way: never two at once. */
  let running: Promise<void> | null = null;
  let againAt = 0;

  const self: Packing = {
    base: null,
    startIfFull() {
      if (overlay.keys >= Math.max(OVERLAY_MIN, handed.machines.size >> 2)) start();
    },
    startForClose() {
      if (overlay.keys >= OVERLAY_MIN) start();
    },
    tidy() {
      running = (async () => {
        try {
          await deleteOtherBases(kv, self.base);
          await commitAll(kv, (await staleGenerationKeys(kv, self.base?.gen ?? 0)).map(deletion));
        } catch (e) {
          log.debug("state store cleanup deferred: {error}", { error: message(e) });
        }
      })().finally(() => {
        running = null;
        self.startIfFull();
      });
    },
    async idle() {
      while (running) await running;
    },
    async collect(stages = true) {
      try {
        await chunks.collect();
        if (stages) await redo.collect();
      } catch (e) {
        log.debug("state store cleanup deferred: {error}", { error: message(e) });
      }
    },
  };

  function start(): void {
    if (running || !deps.ready() || performance.now() < againAt) return;
    const { generation, sealed } = overlay.seal();
    const machines = [...handed.machines.values()];
    const fences = [...handed.fences.values()];
    const at = { id: crypto.randomUUID(), gen: generation, rev: handed.rev };
    running = (async () => {
      const old = self.base;
      try {
        self.base = await writeBase(kv, at, machines, fences, [mutation(FORMAT_KEY, FORMAT_BASE)]);
      } catch (e) {
        overlay.unseal(sealed);
        againAt = performance.now() + PACK_RETRY_MS;
        log.debug("state store: packing the state failed, the overlay stays: {error}", {
          error: message(e),
        });
        // A disk that refused the pages may refuse their deletion too; the next load's tidy finds them.
        await deleteAll(kv, baseKey(at.id)).catch(() => {});
        return;
      }
      chunks.packedBelow(generation);
      // Not the staged parts: one may belong to a batch the flush loop is writing.
      await self.collect(false);
      // What the new base replaced: nothing loads it any more.
      try {
        if (old) await deleteAll(kv, baseKey(old.id));
        else await deletePerRecordKeys(kv);
        await commitAll(kv, (await staleGenerationKeys(kv, generation)).map(deletion));
      } catch (e) {
        log.debug("state store cleanup deferred: {error}", { error: message(e) });
      }
    })().finally(() => running = null);
  }

  return self;
}

/** Pages of bases not in use: replaced ones a cleanup missed, or a packing cut short. */
async function deleteOtherBases(kv: Deno.Kv, base: BaseRef | null): Promise<void> {
  const ranges: Deno.KvListSelector[] = base
    ? [
      { prefix: BASES, end: baseKey(base.id) },
      { prefix: BASES, start: baseKey(`${base.id}\0`) },
    ]
    : [{ prefix: BASES }];
  const dead: Deno.KvKey[] = [];
  for (const selector of ranges) for await (const e of kv.list(selector)) dead.push(e.key);
  await commitAll(kv, dead.map(deletion));
}
