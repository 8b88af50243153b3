// A small seeded RNG (mulberry32) so property tests replay: BFCONF_SEED, default 1.
// It cannot reproduce Go's math/rand sequences; only determinism matters here.

export function defaultSeed(): number {
  const s = Number(Deno.env.get("BFCONF_SEED") ?? "1");
  return Number.isFinite(s) ? s : 1;
}

export class Rng {
  #s: number;

  constructor(seed: number = defaultSeed()) {
    this.#s = seed >>> 0;
  }

  /** Uniform 32-bit unsigned integer. */
  u32(): number {
    let t = (this.#s = (this.#s + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }

  /** Uniform in [0, 1). */
  float(): number {
    return this.u32() / 4294967296;
  }

  /** Uniform integer in [lo, hi], both inclusive. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.float() * (hi - lo + 1));
  }

  pick<T>(xs: readonly T[]): T {
    return xs[this.int(0, xs.length - 1)];
  }

  /** Uniform in [0, 2^63). */
  u63(): bigint {
    return ((BigInt(this.u32()) << 32n) | BigInt(this.u32())) & ((1n << 63n) - 1n);
  }

  bytes(n: number): Uint8Array {
    const b = new Uint8Array(n);
    for (let i = 0; i < n; i++) b[i] = this.u32() & 0xff;
    return b;
  }
}
