// Fencing tokens and their order. All three numbers travel as signed int64 on
// the wire and are compared as bigint: JS numbers lose precision above 2^53
// and strings compare lexically.

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
