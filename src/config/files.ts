// Reading the files flags point at, with errors that name the flag and path.

import { flagError, oneLine, quote } from "./errors.ts";

export type ReadFile = (path: string) => Promise<string>;

/** The default reader: the real filesystem. */
export const readFromDisk: ReadFile = (path) => Deno.readTextFile(path);

/** Read the file `--flag` names; a failure is a ConfigError naming both. */
export async function readFlagFile(
  flag: string,
  path: string,
  readFile: ReadFile,
): Promise<string> {
  try {
    return await readFile(path);
  } catch (err) {
    const why = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    throw flagError(flag, `cannot read ${quote(path)}: ${oneLine(why)}`);
  }
}

/** Read a PEM file and require a block of the given kind. */
export async function readPem(
  flag: string,
  path: string,
  readFile: ReadFile,
  kind: string,
  check: (text: string) => boolean,
): Promise<string> {
  const text = await readFlagFile(flag, path, readFile);
  if (!check(text)) {
    // Never echo the content: it may be a private key.
    throw flagError(flag, `${quote(path)} holds no PEM ${kind} block`);
  }
  return text;
}
