// Go time.ParseDuration syntax, because operators copy flags from the Go
// provider's docs: "0", "0s", "500ms", "2m", "1h30m", "1.5s".

/** Milliseconds per Go duration unit. */
const UNIT_MS: ReadonlyMap<string, number> = new Map([
  ["ns", 1e-6],
  ["us", 1e-3],
  ["µs", 1e-3], // U+00B5 micro sign
  ["μs", 1e-3], // U+03BC Greek mu
  ["ms", 1],
  ["s", 1000],
  ["m", 60_000],
  ["h", 3_600_000],
]);

const TERM = /(\d+\.?\d*|\.\d+)([a-zµμ]+)/y;

/**
 * Parse a non-negative Go-style duration into milliseconds.
 * Throws Error with the problem (no flag name: the caller adds it).
 */
export function parseDuration(text: string): number {
  if (text === "0" || text === "+0") return 0;
  let s = text;
  if (s.startsWith("+")) s = s.slice(1);
  if (s.startsWith("-")) throw new Error(`negative duration ${JSON.stringify(text)}`);
  if (s === "") throw new Error(`invalid duration ${JSON.stringify(text)}`);
  let total = 0;
  TERM.lastIndex = 0;
  while (TERM.lastIndex < s.length) {
    const at = TERM.lastIndex;
    const m = TERM.exec(s);
    if (!m || m.index !== at) {
      const hint = /^\d+(\.\d*)?$/.test(s) ? " (missing unit, e.g. 30s)" : "";
      throw new Error(`invalid duration ${JSON.stringify(text)}${hint}`);
    }
    const unit = UNIT_MS.get(m[2]);
    if (unit === undefined) {
      throw new Error(`unknown unit ${JSON.stringify(m[2])} in duration ${JSON.stringify(text)}`);
    }
    total += Number(m[1]) * unit;
  }
  if (!Number.isFinite(total)) throw new Error(`duration ${JSON.stringify(text)} is too large`);
  // Sub-millisecond units leave float noise (e.g. 0.1ms written as 100us).
  return Math.round(total * 1e6) / 1e6;
}

/** setTimeout's ceiling: larger delays fire at once instead of never. */
const MAX_TIMER_MS = 2_147_483_647;

/** parseDuration for values that drive timers: at most ~24.8 days. */
export function parseTimerDuration(text: string): number {
  const ms = parseDuration(text);
  if (ms > MAX_TIMER_MS) {
    throw new Error(`duration ${JSON.stringify(text)} exceeds 596h (timer limit)`);
  }
  return ms;
}
