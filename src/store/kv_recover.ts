// Recovery: brings the file to whole batches before anything reads or writes
// it. The store runs it once (again after a failure), from load() or the
// first commit, whichever comes first. In order:
//
// 1. A format above the newest this version reads is refused, the file left
//    as it is.
// 2. A file with neither format marker nor revision was never completely
//    written (a first write cut short, or nothing): it is wiped, and holds no
//    fleet.
// 3. A revision without the marker: an older, complete file; it gets the
//    format-1 marker (kv_legacy.ts).
// 4. A marked redo batch is finished, and staged parts without a marker are
//    deleted (kv_redo.ts).
// 5. Writes go to the newest overlay generation on disk, never an older one:
//    it would lose to the newer at load.

import { getLogger } from "@logtape/logtape";
import type { BaseRef } from "./kv_base.ts";
import { deleteAll } from "./kv_commit.ts";
import {
  BASE_KEY,
  FORMAT_KEY,
  FORMAT_NEWEST,
  newerFormat,
  REDO_KEY,
  REV_KEY,
} from "./kv_layout.ts";
import { markUnmarked } from "./kv_legacy.ts";
import { newestGeneration } from "./kv_overlay.ts";
import { rollForward } from "./kv_redo.ts";
import type { RedoMark } from "./kv_redo.ts";

const log = getLogger(["bigfleet", "state"]);

export type Recovered =
  | { holdsFleet: false }
  | {
    holdsFleet: true;
    /** The base in use; null: a format-1 file, whose per-record keys are the base. */
    base: BaseRef | null;
    /** The overlay generation writes go to. */
    generation: number;
  };

export async function recover(kv: Deno.Kv): Promise<Recovered> {
  const [format, mark, rev, base] = await kv.getMany<[number, RedoMark, number, BaseRef]>([
    FORMAT_KEY,
    REDO_KEY,
    REV_KEY,
    BASE_KEY,
  ]);
  if ((format.value ?? 0) > FORMAT_NEWEST) throw new Error(newerFormat(format.value!));
  if (format.value === null && rev.value === null) {
    const keys = await deleteAll(kv, []);
    if (keys > 0) {
      log.warn("state store held {keys} keys of a first inventory cut short; starting over", {
        keys,
      });
    }
    return { holdsFleet: false };
  }
  if (format.value === null) await markUnmarked(kv);
  await rollForward(kv, mark.value);
  return {
    holdsFleet: true,
    base: base.value,
    generation: await newestGeneration(kv, base.value?.gen ?? 0),
  };
}
