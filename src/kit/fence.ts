// Fencing tokens and their order (docs/design.md#fencing). All three numbers
// travel as signed int64 on the wire and are compared as bigint: JS numbers
// lose precision above 2^53 and strings compare lexically.

import { Code, KitError } from "./errors.ts";
import type { FenceEntry, StateStore } from "./store.ts";

export interface Token {
  shardId: string;
  epoch: bigint;
  seq: bigint;
}

export interface Mark {
  epoch: bigint;
  seq: bigint;
}

/** Only the all-zero token with an empty shard is "no token". (0,0) from a named shard is a real token. */
export function isUnfenced(t: Token): boolean {
  return t.shardId === "" && t.epoch === 0n && t.seq === 0n;
}

/** Lexicographic: epoch first, then sequence. Negative values are ordinary values. */
export function isNewer(t: Mark, mark: Mark): boolean {
  return t.epoch > mark.epoch || (t.epoch === mark.epoch && t.seq > mark.seq);
}

/** Map key for a (shard, machine) pair; JSON keeps any character in either part unambiguous. */
export function fenceKey(shardId: string, machineId: string): string {
  return JSON.stringify([shardId, machineId]);
}

/** The high-water marks, one per (shard, machine), including machines that do not exist. */
export interface FenceTable {
  /**
   * Throws FAILED_PRECONDITION for a token that is not strictly newer than
   * its mark; otherwise moves the mark (persisted) and returns. The unfenced
   * token passes without touching anything.
   */
  admit(machineId: string, token: Token): void;
  /** Every mark, as the store keeps them (for a backup). */
  entries(): FenceEntry[];
}

export function createFenceTable(store: StateStore, saved: readonly FenceEntry[]): FenceTable {
  const marks = new Map<string, Mark>();
  for (const f of saved) marks.set(fenceKey(f.shardId, f.machineId), f.mark);
  return {
    entries: () =>
      [...marks].map(([key, mark]) => {
        const [shardId, machineId] = JSON.parse(key) as [string, string];
        return { shardId, machineId, mark };
      }),
    admit(machineId, token) {
      if (isUnfenced(token)) return;
      const key = fenceKey(token.shardId, machineId);
      const mark = marks.get(key);
      if (mark && !isNewer(token, mark)) {
        throw new KitError(
          Code.FailedPrecondition,
          `fenced: token (${token.epoch}, ${token.seq}) of shard "${token.shardId}" is not newer than (${mark.epoch}, ${mark.seq}) for machine ${machineId}`,
        );
      }
      const next = { epoch: token.epoch, seq: token.seq };
      marks.set(key, next);
      store.putFence({ shardId: token.shardId, machineId, mark: next });
    },
  };
}
