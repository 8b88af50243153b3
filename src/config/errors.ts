// Helpers that keep every ConfigError a single line naming its flag.

import { ConfigError } from "./types.ts";

/** `--flag: problem` as a ConfigError. */
export function flagError(flag: string, problem: string): ConfigError {
  return new ConfigError(oneLine(`--${flag}: ${problem}`));
}

/** Run `fn`; rethrow a plain Error as a ConfigError naming the flag. */
export function forFlag<T>(flag: string, fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw flagError(flag, err instanceof Error ? err.message : String(err));
  }
}

/** JSON-quote a user string so it stays on one line. */
export function quote(s: string): string {
  return JSON.stringify(s);
}

/** Collapse whitespace so a message can never span lines. */
export function oneLine(s: string): string {
  return s.replace(/\s+/g, " ").trim();
}
