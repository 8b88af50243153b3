// Percentiles of timings, nearest-rank on an ascending array.

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))];
}

/** `n` sequential calls, each timed in ms; sorted ascending for `percentile`. */
export async function timeCalls(
  n: number,
  call: (i: number) => Promise<unknown>,
): Promise<number[]> {
  const t: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await call(i);
    t.push(performance.now() - t0);
  }
  return t.sort((a, b) => a - b);
}
