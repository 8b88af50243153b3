// The redo log: how a batch too big for one commit stays all or nothing.
//
// - The batch is first staged under ["redo", batch id, n], values of at most
//   ~60 KB; the commit holding its last part also sets ["meta", "redo"] to
//   {id, n}. From that commit on the batch is durable.
// - It is then applied in as many commits as it needs, the last one removing
//   the marker. Recovery finishes a batch whose marker it finds
//   (`rollForward`) and deletes staged parts without one.
// - A failed attempt may have left its marker. The next batch (a retry holds
//   every key of the failed one, newer values winning) replaces or clears it
//   in its own commit, or a restart would replay the older values over it.
// - Staged parts are garbage once any later commit succeeds: `collect()`.

import { getLogger } from "@logtape/logtape";
import { commitAll, deleteAll, deletion, fitsOneCommit, mutation } from "./kv_commit.ts";
import type { Mutation } from "./kv_commit.ts";
import { REDO_KEY, REDO_PARTS, redoKey } from "./kv_layout.ts";

/** Mutations packed into one staged value (a KV value holds 64 KiB). */
const STAGE_BYTES = 60_000;

const log = getLogger(["bigfleet", "state"]);

export interface RedoMark {
  id: string;
  /** Number of staged parts. */
  n: number;
}

/** A staged mutation: [key] deletes, [key, value] sets. */
type Staged = [Deno.KvKey] | [Deno.KvKey, unknown];

export interface RedoLog {
  /** Commits `muts` then `tail` all or nothing: one commit when they fit, else through the log. */
  commit(muts: Mutation[], tail: Mutation[]): Promise<void>;
  /** Deletes the staged parts of batches done with; put back for later if the delete fails. */
  collect(): Promise<void>;
}

export function createRedoLog(kv: Deno.Kv): RedoLog {
  /** A marker of a failed attempt may be on disk: the next commit must clear or replace it. */
  let staleMark = false;
  const dead: string[] = [];

  async function viaLog(muts: Mutation[], tail: Mutation[]): Promise<void> {
    const id = crypto.randomUUID();
    const parts: Mutation[] = [];
    let part: Staged[] = [];
    let bytes = 0;
    const cut = () => {
      parts.push({ key: [...redoKey(id), parts.length], value: part, size: bytes + 64 });
      part = [];
      bytes = 0;
    };
    for (const m of [...muts, ...tail]) {
      if (part.length > 0 && bytes + m.size > STAGE_BYTES) cut();
      part.push(m.value === undefined ? [m.key] : [m.key, m.value]);
      bytes += m.size;
    }
    if (part.length > 0) cut();
    // Whatever happens from here, these parts are garbage once a later commit succeeds.
    dead.push(id);
    staleMark = true;
    await commitAll(kv, parts, [mutation(REDO_KEY, { id, n: parts.length } satisfies RedoMark)]);
    await commitAll(kv, muts, [...tail, deletion(REDO_KEY)]);
  }

  return {
    async commit(muts, tail) {
      if (fitsOneCommit([...muts, ...tail, deletion(REDO_KEY)])) {
        await commitAll(kv, muts, staleMark ? [...tail, deletion(REDO_KEY)] : tail);
      } else {
        await viaLog(muts, tail);
      }
      staleMark = false;
    },
    async collect() {
      while (dead.length > 0) {
        const id = dead.pop()!;
        await deleteAll(kv, redoKey(id)).catch((e) => {
          dead.push(id);
          throw e;
        });
      }
    },
  };
}

/** Finishes a batch whose marker survived a crash, then deletes every staged part. */
export async function rollForward(kv: Deno.Kv, mark: RedoMark | null): Promise<void> {
  if (mark) {
    const staged: Staged[] = [];
    let parts = 0;
    for await (const e of kv.list<Staged[]>({ prefix: redoKey(mark.id) })) {
      staged.push(...e.value);
      parts++;
    }
    if (parts !== mark.n) {
      throw new Error(`state store: interrupted batch ${mark.id} has ${parts} of ${mark.n} parts`);
    }
    log.info("state store: finishing a batch of {changes} changes cut short by a crash", {
      changes: staged.length,
    });
    await commitAll(kv, staged.map(([key, value]) => mutation(key, value)), [deletion(REDO_KEY)]);
  }
  await deleteAll(kv, REDO_PARTS);
}
