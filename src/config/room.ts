// Node capacity policy (docs/configuration.md#node-capacity): how much of each
// node's memory and CPUs the provider may hand out, per provider with per-node
// overrides. Each flag takes a default and `NODE=VALUE` pairs, e.g.
// `--proxmox-memory-overcommit=1.0,pve3=1.5`; a pair alone keeps the built-in
// default for the other nodes.

import { forFlag, quote } from "./errors.ts";
import type { FlagValues } from "./flags.ts";
import { ROOM_FLAGS } from "./room_flags.ts";

/** What a node keeps for itself: a fixed size, or a share of its memory. */
export type MemoryReserve = { mib: number } | { percent: number };

/** One node's policy, every field resolved. */
export interface NodePolicy {
  /** Guests may hold up to (memory − reserve) × this. */
  memoryOvercommit: number;
  memoryReserve: MemoryReserve;
  /** Guests may hold up to CPUs × this vCPUs; 0: no bound on the sum (one VM ≤ the node's CPUs still). */
  cpuOvercommit: number;
}

/** The policy of every node of --nodes. */
export type RoomPolicy = ReadonlyMap<string, NodePolicy>;

/** Built-in defaults: the flag table's. */
export const ROOM_DEFAULTS = {
  memoryOvercommit: ROOM_FLAGS["proxmox-memory-overcommit"].default,
  memoryReserve: ROOM_FLAGS["proxmox-memory-reserve"].default,
  cpuOvercommit: ROOM_FLAGS["proxmox-cpu-overcommit"].default,
} as const;

/** Each flag and the policy field it sets. */
const FLAG_FIELDS = {
  "proxmox-memory-overcommit": "memoryOvercommit",
  "proxmox-memory-reserve": "memoryReserve",
  "proxmox-cpu-overcommit": "cpuOvercommit",
} as const;

const RATIO = /^(?:\d+(?:\.\d*)?|\.\d+)$/;

/** A memory overcommit ratio: a decimal above 0, at most 10. */
function memoryRatio(text: string): number {
  const n = RATIO.test(text) ? Number(text) : NaN;
  if (!(n > 0 && n <= 10)) {
    throw new Error(
      `want a ratio above 0 and at most 10 (1.0: physical memory), got ${quote(text)}`,
    );
  }
  return n;
}

/** A CPU overcommit ratio: 0 (no bound on the sum) or a decimal up to 64. */
function cpuRatio(text: string): number {
  const n = RATIO.test(text) ? Number(text) : NaN;
  if (!(n >= 0 && n <= 64)) {
    throw new Error(`want a ratio from 0 (no bound) to 64 vCPUs per CPU, got ${quote(text)}`);
  }
  return n;
}

/** `2GiB`, `1536MiB` (also `Gi`, `Mi`), or `10%` of the node's memory (below 100). */
export function memoryReserve(text: string): MemoryReserve {
  const pct = /^(\d+(?:\.\d+)?)%$/.exec(text);
  if (pct) {
    const p = Number(pct[1]);
    if (p >= 100) throw new Error(`a reserve must be below 100% of the node, got ${quote(text)}`);
    return { percent: p };
  }
  const size = /^(\d+)(MiB|Mi|GiB|Gi)$/.exec(text);
  if (!size) {
    throw new Error(
      `want a size such as 2GiB or 1536MiB, or a share such as 10%, got ${quote(text)}`,
    );
  }
  const n = Number(size[1]);
  return { mib: size[2].startsWith("G") ? n * 1024 : n };
}

/** `DEFAULT[,NODE=VALUE...]` or `NODE=VALUE,...`: the default (or null) and the overrides. */
function parseOverrides<T>(
  text: string,
  nodes: readonly string[],
  parse: (v: string) => T,
): { fallback: T | null; perNode: Map<string, T> } {
  let fallback: T | null = null;
  const perNode = new Map<string, T>();
  for (const [i, part] of text.split(",").map((p) => p.trim()).entries()) {
    const eq = part.indexOf("=");
    if (eq < 0) {
      if (i !== 0) throw new Error(`only the first value may stand alone, got ${quote(part)}`);
      fallback = parse(part);
      continue;
    }
    const node = part.slice(0, eq);
    if (!nodes.includes(node)) {
      throw new Error(`node ${quote(node)} is not one of --nodes (${nodes.join(",")})`);
    }
    if (perNode.has(node)) throw new Error(`node ${quote(node)} given twice`);
    perNode.set(node, parse(part.slice(eq + 1)));
  }
  return { fallback, perNode };
}

/** One flag resolved for every node: its override, else its default, else the built-in one. */
function perNode<T>(
  flag: keyof typeof FLAG_FIELDS,
  text: string,
  nodes: readonly string[],
  parse: (v: string) => T,
): (node: string) => T {
  const { fallback, perNode } = forFlag(flag, () => parseOverrides(text, nodes, parse));
  const base = fallback ?? parse(ROOM_DEFAULTS[FLAG_FIELDS[flag]]);
  return (node) => perNode.get(node) ?? base;
}

/** The three capacity flags, checked against --nodes. Throws a one-line ConfigError. */
export function loadRoomPolicy(f: FlagValues, nodes: readonly string[]): RoomPolicy {
  return roomPolicy({
    memoryOvercommit: f["proxmox-memory-overcommit"],
    memoryReserve: f["proxmox-memory-reserve"],
    cpuOvercommit: f["proxmox-cpu-overcommit"],
  }, nodes);
}

/** The policy the flags' texts give (the built-in defaults where a text is left out). */
export function roomPolicy(
  texts: Partial<Record<keyof typeof ROOM_DEFAULTS, string>>,
  nodes: readonly string[],
): RoomPolicy {
  const t = { ...ROOM_DEFAULTS, ...texts };
  const mem = perNode("proxmox-memory-overcommit", t.memoryOvercommit, nodes, memoryRatio);
  const reserve = perNode("proxmox-memory-reserve", t.memoryReserve, nodes, memoryReserve);
  const cpu = perNode("proxmox-cpu-overcommit", t.cpuOvercommit, nodes, cpuRatio);
  return new Map(nodes.map((n) => [n, {
    memoryOvercommit: mem(n),
    memoryReserve: reserve(n),
    cpuOvercommit: cpu(n),
  }]));
}

/** The policy as one line per node, for the startup log and `machines room`. */
export function describePolicy(p: NodePolicy): string {
  const reserve = "mib" in p.memoryReserve
    ? `${p.memoryReserve.mib} MiB`
    : `${p.memoryReserve.percent}%`;
  const cpu = p.cpuOvercommit === 0 ? "no bound" : `× ${p.cpuOvercommit}`;
  return `memory (physical − ${reserve}) × ${p.memoryOvercommit}, vCPUs ${cpu}`;
}
