// Boots the provider as a child process exactly as the certification runner
// does (flags, readiness = TCP accept within 20 s, stop = SIGKILL), keeping
// its stdout/stderr in a log file and in memory for failure messages.

import { atExit } from "./teardown.ts";
import { waitFor, WaitTimeout } from "./time.ts";

export const REPO_ROOT = new URL("../../", import.meta.url).pathname;

/**
 * The runtime flags the compiled binary is built with (deno.json `compile`
 * task): its `--v8-flags=…` and `--no-code-cache`, if there.
 */
export function compiledRuntimeFlags(): string[] {
  const compile = JSON.parse(Deno.readTextFileSync(`${REPO_ROOT}deno.json`)).tasks.compile;
  const command: string = typeof compile === "string" ? compile : compile.command;
  return command.split(/\s+/).filter((t) => t.startsWith("--v8-flags=") || t === "--no-code-cache");
}

/** `deno run` with the permissions and runtime flags the compiled binary is built with. */
export const DEFAULT_PROVIDER_CMD = [
  Deno.execPath(),
  "run",
  "--allow-net",
  "--allow-read",
  "--allow-write",
  "--allow-env",
  "--allow-sys",
  "--unstable-kv",
  ...compiledRuntimeFlags(),
  `${REPO_ROOT}main.ts`,
];

/**
 * Whether the provider under test is this repository's: no BFCONF_PROVIDER_CMD
 * swapped another one in. Where the contract lets a provider choose, a test then
 * asserts the choice this one made (docs/design.md).
 */
export function isOwnProvider(): boolean {
  return !Deno.env.get("BFCONF_PROVIDER_CMD");
}

/** BFCONF_PROVIDER_CMD (space-separated) swaps in e.g. a compiled binary. */
export function providerCommand(): string[] {
  const env = Deno.env.get("BFCONF_PROVIDER_CMD");
  return env ? env.split(" ").filter((s) => s !== "") : DEFAULT_PROVIDER_CMD;
}

export interface StartOptions {
  /** Provider flags, without --addr (added with a free port unless `port` is given). */
  args: string[];
  env?: Record<string, string>;
  /** Command prefix; defaults to providerCommand(). */
  cmd?: string[];
  port?: number;
  readyTimeoutMs?: number;
  /** Pause between readiness probes; 100 ms like the runner. */
  readyPollMs?: number;
  /** Where stdout+stderr go; a temp file by default. */
  logPath?: string;
}

export interface ProviderProcess {
  addr: string;
  port: number;
  pid: number;
  logPath: string;
  /** Milliseconds from spawn to the first accepted TCP connection. */
  readyMs: number;
  kill(signal?: Deno.Signal): void;
  /** SIGKILL (as the runner does) and wait for the exit. */
  stop(): Promise<void>;
  stderr(): string;
  exited: Promise<Deno.CommandStatus>;
  /** Set once the process has exited. */
  exitStatus(): Deno.CommandStatus | undefined;
}

/** Flags the runner boots a provider with (minus --addr). */
export function fakeProviderArgs(o: {
  seed: number;
  state?: string;
  fakeDelay?: string;
  provider?: string;
  extra?: string[];
}): string[] {
  const a = [
    `--provider=${o.provider ?? "certify"}`,
    "--use-fake-backend",
    `--seed-count=${o.seed}`,
    "--metrics-addr=",
  ];
  if (o.state !== undefined) a.push(`--state=${o.state}`);
  if (o.fakeDelay !== undefined) a.push(`--fake-delay=${o.fakeDelay}`);
  return [...a, ...(o.extra ?? [])];
}

/** A port the kernel just handed out on 127.0.0.1 (racy but adequate on loopback). */
export function freePort(): number {
  const l = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (l.addr as Deno.NetAddr).port;
  l.close();
  return port;
}

/** One TCP connect attempt with a 200 ms cap (the runner's dial timeout). */
export async function tcpAccepts(port: number, hostname = "127.0.0.1"): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const attempt = Deno.connect({ hostname, port }).then((c) => {
    c.close();
    return true;
  }, () => false);
  const timeout = new Promise<boolean>((r) => timer = setTimeout(() => r(false), 200));
  const ok = await Promise.race([attempt, timeout]);
  clearTimeout(timer);
  return ok;
}

interface Spawned {
  child: Deno.ChildProcess;
  logPath: string;
  stderr(): string;
  stdout(): string;
  pumped: Promise<void>;
}

/** Spawn with output pumped to a log file and memory; no readiness wait. */
export function spawnProvider(args: string[], o: Omit<StartOptions, "args"> = {}): Spawned {
  const cmd = o.cmd ?? providerCommand();
  const logPath = o.logPath ??
    Deno.makeTempFileSync({ prefix: "bfconf-provider-", suffix: ".log" });
  const log = Deno.openSync(logPath, { write: true, create: true, truncate: true });
  const child = new Deno.Command(cmd[0], {
    args: [...cmd.slice(1), ...args],
    cwd: REPO_ROOT,
    env: o.env,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  // Killed at exit if no test stopped it (a --filter may skip the lane's "stop" test).
  const forget = atExit(() => child.kill("SIGKILL"));
  child.status.then(forget);
  let errText = "";
  let outText = "";
  const pump = async (s: ReadableStream<Uint8Array>, isErr: boolean) => {
    const d = new TextDecoder();
    for await (const chunk of s) {
      log.writeSync(chunk);
      const t = d.decode(chunk, { stream: true });
      if (isErr) errText += t;
      else outText += t;
    }
  };
  const pumped = Promise.all([pump(child.stdout, false), pump(child.stderr, true)])
    .then(() => log.close(), () => log.close());
  return { child, logPath, stderr: () => errText, stdout: () => outText, pumped };
}

/** Start a provider and wait until its gRPC port accepts TCP (≤ 20 s). */
export async function startProvider(o: StartOptions): Promise<ProviderProcess> {
  const port = o.port ?? freePort();
  const addr = `127.0.0.1:${port}`;
  const t0 = performance.now();
  const sp = spawnProvider([`--addr=${addr}`, ...o.args], o);
  let status: Deno.CommandStatus | undefined;
  const exited = sp.child.status.then(async (s) => {
    status = s;
    await sp.pumped;
    return s;
  });
  const proc: ProviderProcess = {
    addr,
    port,
    pid: sp.child.pid,
    logPath: sp.logPath,
    readyMs: 0,
    kill(signal: Deno.Signal = "SIGKILL") {
      if (status) return;
      try {
        sp.child.kill(signal);
      } catch { /* already gone */ }
    },
    async stop() {
      proc.kill("SIGKILL");
      await exited;
    },
    stderr: sp.stderr,
    exited,
    exitStatus: () => status,
  };
  try {
    await waitFor(
      () => `the provider to accept on ${addr}; stderr:\n${tail(sp.stderr())}`,
      async () => {
        if (status) {
          await sp.pumped;
          throw new Error(
            `provider exited with code ${status.code} before serving on ${addr}; stderr:\n${
              tail(sp.stderr())
            }`,
          );
        }
        return await tcpAccepts(port);
      },
      o.readyTimeoutMs ?? 20_000,
      o.readyPollMs ?? 100,
    );
  } catch (e) {
    await proc.stop();
    throw e;
  }
  proc.readyMs = performance.now() - t0;
  return proc;
}

/** What the provider logs once it serves (src/app.ts), as JSON or as text. */
export const SERVING_MESSAGE = "serving CapacityProvider";

/** The provider's serving line in `stderr`, as written; undefined until it is. */
export function servingLine(stderr: string): string | undefined {
  return stderr.split("\n").find((l) => l.includes(SERVING_MESSAGE));
}

/** Waits (bounded) until the provider has logged that it serves; resolves to the line. */
export function waitForServingLine(
  proc: { stderr(): string },
  timeoutMs = 10_000,
): Promise<string> {
  return waitFor(
    () => `the "${SERVING_MESSAGE}" line; stderr:\n${tail(proc.stderr())}`,
    () => servingLine(proc.stderr()),
    timeoutMs,
  );
}

/** The same for a provider logging JSON (the default): the line's fields. */
export async function waitForServing(
  proc: { stderr(): string },
  timeoutMs = 10_000,
): Promise<Record<string, unknown>> {
  return JSON.parse(await waitForServingLine(proc, timeoutMs));
}

export interface ExitResult {
  /** null when it was still running at the timeout (and was killed). */
  code: number | null;
  stderr: string;
  stdout: string;
  /** Whether its port accepted TCP at some point (only checked when `port` is given). */
  served: boolean;
}

/** Run the provider expecting it to exit on its own (startup validation tests). */
export async function runUntilExit(
  args: string[],
  o: Omit<StartOptions, "args"> & { timeoutMs?: number; watchPort?: number } = {},
): Promise<ExitResult> {
  const sp = spawnProvider(args, o);
  let status: Deno.CommandStatus | undefined;
  sp.child.status.then((s) => status = s);
  let served = false;
  await waitFor(
    "the provider to exit",
    async () => {
      if (o.watchPort !== undefined && !served) served = await tcpAccepts(o.watchPort);
      return status !== undefined;
    },
    o.timeoutMs ?? 20_000,
    50,
  ).catch((e) => {
    // Still running at the bound: reported as code null (killed below).
    if (!(e instanceof WaitTimeout)) throw e;
  });
  if (!status) {
    try {
      sp.child.kill("SIGKILL");
    } catch { /* gone */ }
    await sp.child.status;
  }
  await sp.pumped;
  return { code: status ? status.code : null, stderr: sp.stderr(), stdout: sp.stdout(), served };
}

/** The last lines of a log, for failure messages. */
export function tail(text: string, lines = 40): string {
  return text.split("\n").slice(-lines).join("\n");
}
