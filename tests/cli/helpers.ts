// Runs the binary's entrypoint exactly as an operator would (`deno run` with
// the compile task's permissions, see tests/harness/process.ts) and captures
// its exit code, stdout and stderr.

import { DEFAULT_PROVIDER_CMD, REPO_ROOT } from "../harness/process.ts";

export interface CliResult {
  code: number;
  stdout: string;
  stderr: string;
}

export interface CliOptions {
  env?: Record<string, string>;
  /** Working directory; the repository root by default. */
  cwd?: string;
  /** Command prefix; the repository's main.ts under `deno run` by default. */
  cmd?: string[];
  timeoutMs?: number;
}

/** Run `main.ts <args>` to completion (SIGKILL after the timeout, reported as code -1). */
export async function cli(args: string[], o: CliOptions = {}): Promise<CliResult> {
  const cmd = o.cmd ?? DEFAULT_PROVIDER_CMD;
  const child = new Deno.Command(cmd[0], {
    args: [...cmd.slice(1), ...args],
    cwd: o.cwd ?? REPO_ROOT,
    env: o.env,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const timer = setTimeout(() => {
    try {
      child.kill("SIGKILL");
    } catch { /* gone */ }
  }, o.timeoutMs ?? 30_000);
  const out = await child.output();
  clearTimeout(timer);
  const d = new TextDecoder();
  return {
    code: out.signal === "SIGKILL" ? -1 : out.code,
    stdout: d.decode(out.stdout),
    stderr: d.decode(out.stderr),
  };
}

/** Non-empty lines of a text. */
export function lines(text: string): string[] {
  return text.split("\n").filter((l) => l.trim() !== "");
}
