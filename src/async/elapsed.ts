// Durations for the metrics.

/** Seconds elapsed since `t0` (a performance.now() value). */
export function secondsSince(t0: number): number {
  return (performance.now() - t0) / 1000;
}
