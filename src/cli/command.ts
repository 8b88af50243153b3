// One subcommand of the binary, and the exit codes every command shares
// (docs/cli.md#exit-codes): scripts branch on them, so they never change.

import { parseTimerDuration } from "../config/duration.ts";
import { quote } from "../config/errors.ts";
import { type FlagTable, parseArgv, type Parsed, type ParseOptions } from "../config/flags.ts";
import { ConfigError } from "../config/types.ts";

export const PROGRAM = "bigfleet-proxmox";

export const EXIT_OK = 0;
/** The provider (or the backend) failed or could not be reached. */
export const EXIT_FAILURE = 1;
/** Bad flags, arguments or files: nothing was attempted. */
export const EXIT_USAGE = 2;
/** `machines get` of an id the provider does not know. */
export const EXIT_NOT_FOUND = 3;

export interface Command {
  readonly name: string;
  /** One line for command lists. */
  readonly summary: string;
  /** What follows the program name in the usage line, e.g. "machines list [flags]". */
  readonly usage: string;
  /** A paragraph under the usage line. */
  readonly description?: string;
  readonly flags?: FlagTable;
  /** Lines printed after the flags (examples, pointers to docs). */
  readonly footer?: string;
  readonly subcommands?: readonly Command[];
  /** The values its one positional argument may take, when they are fixed (shell completion offers them). */
  readonly choices?: readonly string[];
  /** Runs with the arguments after the command's name; resolves to the exit code. */
  run?(args: string[], ctx: Context): Promise<number>;
}

/** What the dispatcher hands a command besides its arguments. */
export interface Context {
  /** Print this command's help on stdout. */
  printHelp(): void;
  /** The top of the command tree (what `completion` describes). */
  root: Command;
}

/** Print `error: <message>` as the one stderr line of a failed command. */
export function fail(message: string, code: number): number {
  console.error(`error: ${message}`);
  return code;
}

/**
 * A command's flags and arguments, or the exit code to return at once:
 * EXIT_OK after printing help, EXIT_USAGE after naming the bad flag.
 */
export function parseCommandArgs<T extends FlagTable>(
  table: T,
  args: readonly string[],
  ctx: Context,
  opts: Omit<ParseOptions, "help"> = {},
): Parsed<T> | number {
  try {
    const parsed = parseArgv(table, args, { ...opts, help: true });
    if (parsed.help) {
      ctx.printHelp();
      return EXIT_OK;
    }
    return parsed;
  } catch (e) {
    if (e instanceof ConfigError) return fail(e.message, EXIT_USAGE);
    throw e;
  }
}

const encoder = new TextEncoder();

/** Write all of `text` to stdout (writeSync may write less than asked). */
export function write(text: string): void {
  const bytes = encoder.encode(text);
  for (let off = 0; off < bytes.length;) off += Deno.stdout.writeSync(bytes.subarray(off));
}

/** A Go duration above 0 (timeouts, intervals); throws Error for forFlag to name the flag. */
export function positiveDuration(text: string): number {
  const ms = parseTimerDuration(text);
  if (ms <= 0) throw new Error(`must be more than 0, got ${quote(text)}`);
  return ms;
}

/**
 * The serving flags among a command's parsed values, back as argv for
 * loadConfig: a command that takes the serving flags validates them exactly
 * as serving does (same table, defaults and checks).
 */
export function servingArgv(
  table: FlagTable,
  values: Readonly<Record<string, string | boolean>>,
): string[] {
  return Object.entries(table).flatMap(([name, spec]) =>
    values[name] === spec.default ? [] : [`--${name}=${values[name]}`]
  );
}
