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

function spawn(args: string[], o: CliOptions): Deno.ChildProcess {
  const cmd = o.cmd ?? DEFAULT_PROVIDER_CMD;
  return new Deno.Command(cmd[0], {
    args: [...cmd.slice(1), ...args],
    cwd: o.cwd ?? REPO_ROOT,
    env: o.env,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
}

/** Run `main.ts <args>` to completion (SIGKILL after the timeout, reported as code -1). */
export async function cli(args: string[], o: CliOptions = {}): Promise<CliResult> {
  const child = spawn(args, o);
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

export interface RunningCli {
  pid: number;
  /** Resolves with the first stdout line `pred` accepts (fails after `timeoutMs`). */
  waitForLine(pred: (line: string) => boolean, what: string, timeoutMs?: number): Promise<string>;
  /** Every stdout line so far. */
  lines(): string[];
  stderr(): string;
  kill(signal: Deno.Signal): void;
  status: Promise<Deno.CommandStatus>;
}

/** Start `main.ts <args>` and follow its stdout line by line (for watch). */
export function spawnCli(args: string[], o: CliOptions = {}): RunningCli {
  const child = spawn(args, o);
  const out: string[] = [];
  let err = "";
  let partial = "";
  const waiters = new Set<() => void>();
  const pump = async () => {
    const d = new TextDecoder();
    for await (const chunk of child.stdout) {
      partial += d.decode(chunk, { stream: true });
      const parts = partial.split("\n");
      partial = parts.pop()!;
      out.push(...parts);
      for (const w of waiters) w();
    }
  };
  const pumpErr = async () => {
    const d = new TextDecoder();
    for await (const chunk of child.stderr) err += d.decode(chunk, { stream: true });
  };
  const pumped = Promise.all([pump(), pumpErr()]);
  return {
    pid: child.pid,
    lines: () => [...out],
    stderr: () => err,
    kill(signal) {
      try {
        child.kill(signal);
      } catch { /* gone */ }
    },
    status: child.status.then(async (s) => {
      await pumped;
      return s;
    }),
    waitForLine(pred, what, timeoutMs = 20_000) {
      return new Promise((resolve, reject) => {
        let from = 0;
        const check = () => {
          for (; from < out.length; from++) {
            if (pred(out[from])) {
              cleanup();
              resolve(out[from]);
              return;
            }
          }
        };
        const timer = setTimeout(() => {
          cleanup();
          reject(
            new Error(`timed out waiting for ${what}; stdout:\n${out.join("\n")}\nstderr:\n${err}`),
          );
        }, timeoutMs);
        const cleanup = () => {
          clearTimeout(timer);
          waiters.delete(check);
        };
        waiters.add(check);
        check();
      });
    },
  };
}
