// Slot prices: an explicit `--prices type=usd` entry wins, otherwise the
// synthetic vCPU x per-vCPU + GiB x per-GiB rate.

import type { InstanceType } from "./types.ts";
import { quote } from "./errors.ts";

export interface Pricing {
  /** Explicit USD/hour per instance type. */
  explicit: Map<string, number>;
  perVcpuHour: number;
  perGibHour: number;
}

const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/;

/** A finite, non-negative decimal price. Throws Error with the problem. */
export function parsePrice(text: string): number {
  const t = text.trim();
  if (!DECIMAL.test(t)) throw new Error(`invalid price ${quote(text)}`);
  const n = Number(t);
  if (!Number.isFinite(n)) throw new Error(`price ${quote(text)} is not finite`);
  if (n < 0) throw new Error(`price ${quote(text)} is negative`);
  return n;
}

/** Parse `type=usd,type=usd`; empty text is no explicit prices. */
export function parsePrices(text: string): Map<string, number> {
  const prices = new Map<string, number>();
  for (const part of text.split(",")) {
    const pair = part.trim();
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    if (eq < 0) throw new Error(`want type=usd, got ${quote(pair)}`);
    const type = pair.slice(0, eq).trim();
    if (type === "") throw new Error(`empty instance type in ${quote(pair)}`);
    if (prices.has(type)) throw new Error(`instance type ${quote(type)} priced twice`);
    prices.set(type, parsePrice(pair.slice(eq + 1)));
  }
  return prices;
}

/** USD/hour of one instance type; an unknown type prices 0. */
export function priceOf(
  pricing: Pricing,
  catalog: Map<string, InstanceType>,
  name: string,
): number {
  const explicit = pricing.explicit.get(name);
  if (explicit !== undefined) return explicit;
  const it = catalog.get(name);
  if (it === undefined) return 0;
  const usd = it.vcpu * pricing.perVcpuHour + (it.memoryMib / 1024) * pricing.perGibHour;
  // Binary floats turn 0.0368 into 0.036800000000000006; prices are compared and shown.
  return Math.round(usd * 1e9) / 1e9;
}
