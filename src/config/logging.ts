// How the provider logs: the lowest level and the line format, from
// --log-level / --log-format or BIGFLEET_LOG_LEVEL / BIGFLEET_LOG_FORMAT (the
// flag wins). A level is accepted in every spelling a log line shows it in
// (JSON `WARN`, logtape's `warning`, the short `WRN`, `err`, ...), in any
// case; anything else stops startup with one line.

import { flagError, oneLine, quote } from "./errors.ts";
import { ConfigError } from "./types.ts";

/** logtape's level names, lowest first. */
export const LOG_LEVELS = ["trace", "debug", "info", "warning", "error", "fatal"] as const;
export type LogLevelName = typeof LOG_LEVELS[number];
export const LOG_FORMATS = ["json", "text"] as const;
export type LogFormat = typeof LOG_FORMATS[number];

export interface LogSettings {
  level: LogLevelName;
  format: LogFormat;
}

export const LEVEL_ENV = "BIGFLEET_LOG_LEVEL";
export const FORMAT_ENV = "BIGFLEET_LOG_FORMAT";

/** Every accepted spelling (lower case) → the level: full names, as JSON prints them, abbreviated. */
const SPELLINGS: ReadonlyMap<string, LogLevelName> = new Map([
  ...LOG_LEVELS.map((l) => [l, l] as const),
  ["warn", "warning"],
  ["err", "error"],
  ["trc", "trace"],
  ["dbg", "debug"],
  ["inf", "info"],
  ["wrn", "warning"],
  ["ftl", "fatal"],
]);

const WANT_LEVEL = "trace, debug, info, warn, error or fatal";

/** The level a spelling names, or null. */
export function parseLogLevel(text: string): LogLevelName | null {
  return SPELLINGS.get(text.trim().toLowerCase()) ?? null;
}

/**
 * The settings from the flags (empty: not given) and the environment.
 * Throws a one-line ConfigError naming the flag or variable.
 */
export function loadLogging(
  flags: { level: string; format: string },
  env: (name: string) => string | undefined = (name) => Deno.env.get(name),
): LogSettings {
  const level = setting("log-level", LEVEL_ENV, flags.level, env, (text) => {
    const parsed = parseLogLevel(text);
    if (parsed === null) throw new Error(`unknown log level ${quote(text)} (want ${WANT_LEVEL})`);
    return parsed;
  }) ?? "info";
  const format = setting("log-format", FORMAT_ENV, flags.format, env, (text) => {
    const f = LOG_FORMATS.find((x) => x === text.trim().toLowerCase());
    if (f === undefined) throw new Error(`unknown log format ${quote(text)} (want json or text)`);
    return f;
  }) ?? "json";
  return { level, format };
}

/** The flag's value when given, else the variable's; parsed, or null when neither is set. */
function setting<T>(
  flag: string,
  variable: string,
  flagText: string,
  env: (name: string) => string | undefined,
  parse: (text: string) => T,
): T | null {
  const fromFlag = flagText !== "";
  const text = fromFlag ? flagText : env(variable) ?? "";
  if (text === "") return null;
  try {
    return parse(text);
  } catch (err) {
    const problem = (err as Error).message;
    if (fromFlag) throw flagError(flag, problem);
    throw new ConfigError(oneLine(`${variable}: ${problem}`));
  }
}
