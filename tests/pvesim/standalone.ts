// The standalone simulator (`deno task pvesim`) as a child process, for the
// tests that follow docs/try-it.md: started with the task's own command (so a
// signal reaches the simulator itself), read until it has printed the
// provider flags, killed if it has not within the bound.

import { REPO_ROOT } from "../harness/process.ts";

export interface Standalone {
  child: Deno.ChildProcess;
  /** Everything it printed up to and including the `provider flags:` line. */
  out: string;
  /** The `provider flags:` line's flags. */
  flags: string[];
  /** The folder holding its CA, server certificate and token file. */
  pki: string;
}

/** `deno task pvesim`'s command from deno.json, with this Deno. */
export function pvesimCommand(): string[] {
  const task = JSON.parse(Deno.readTextFileSync(`${REPO_ROOT}deno.json`)).tasks.pvesim as string;
  return task.split(" ").map((w, i) => (i === 0 && w === "deno" ? Deno.execPath() : w));
}

/** Starts it with `args`; rejects (and kills it) when it prints no flags within `timeoutMs`. */
export async function spawnStandalone(args: string[], timeoutMs = 30_000): Promise<Standalone> {
  const cmd = pvesimCommand();
  const child = new Deno.Command(cmd[0], {
    args: [...cmd.slice(1), ...args],
    cwd: REPO_ROOT,
    stdout: "piped",
    stderr: "null",
    stdin: "null",
  }).spawn();
  // A simulator that never prints its flags is killed, which ends the read below.
  const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let out = "";
  try {
    while (!/^provider flags: .*\n/m.test(out)) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`pvesim ended before printing its flags:\n${out}`);
      out += value;
    }
  } catch (e) {
    child.kill("SIGKILL");
    throw e;
  } finally {
    clearTimeout(timer);
    reader.releaseLock();
  }
  // Nothing more is read: let the rest of its output go.
  child.stdout.cancel().catch(() => {});
  const flags = /^provider flags: (.*)$/m.exec(out)![1].split(" ");
  const caFile = /^CA file: +(.+)$/m.exec(out)![1];
  return { child, out, flags, pki: caFile.slice(0, caFile.lastIndexOf("/")) };
}
