// Shared pieces of the server tests: a provider process with its metrics
// port, /metrics parsing, probes over HTTP, a grpc-js client with any
// credentials, and in-process apps built from real flags.

import * as grpc from "@grpc/grpc-js";
import { Buffer } from "node:buffer";
import { freePort, REPO_ROOT, startProvider } from "../harness/process.ts";
import type { ProviderProcess, StartOptions } from "../harness/process.ts";
import { capacityProviderCtor } from "../harness/proto.ts";
import { loadConfig } from "../../src/config/load.ts";
import { startApp } from "../../src/app.ts";
import type { App, AppOptions } from "../../src/app.ts";

export { sleep, waitFor } from "../harness/time.ts";
export { waitForServing } from "../harness/process.ts";

export interface OpsProvider extends ProviderProcess {
  metricsPort: number;
}

/** A real provider process (on the fake backend unless `real`) with /metrics on its own port. */
export async function startWithMetrics(
  args: string[],
  o: Omit<StartOptions, "args"> & { real?: boolean } = {},
): Promise<OpsProvider> {
  const metricsPort = freePort();
  const backend = o.real ? [] : ["--use-fake-backend"];
  const proc = await startProvider({
    ...o,
    args: [...backend, `--metrics-addr=127.0.0.1:${metricsPort}`, ...args],
  });
  return Object.assign(proc, { metricsPort });
}

export interface Probe {
  status: number;
  body: string;
  contentType: string;
}

export async function httpGet(port: number, path: string): Promise<Probe> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`);
  return {
    status: res.status,
    body: await res.text(),
    contentType: res.headers.get("content-type") ?? "",
  };
}

/** Sample name + sorted labels → value, from Prometheus text format. */
export type Samples = Map<string, number>;

export function parseMetrics(text: string): Samples {
  const out: Samples = new Map();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/);
    if (!m) throw new Error(`unparsable metrics line: ${line}`);
    out.set(sampleKey(m[1], parseLabels(m[3] ?? "")), Number(m[4]));
  }
  return out;
}

function parseLabels(text: string): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const m of text.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[m[1]] = m[2];
  return labels;
}

export function sampleKey(name: string, labels: Record<string, string> = {}): string {
  const parts = Object.keys(labels).sort().map((k) => `${k}=${labels[k]}`);
  return parts.length ? `${name}{${parts.join(",")}}` : name;
}

export async function scrape(port: number): Promise<Samples> {
  return parseMetrics((await httpGet(port, "/metrics")).body);
}

/** A sample's value; throws naming the sample when it is absent. */
export function sample(s: Samples, name: string, labels: Record<string, string> = {}): number {
  const v = s.get(sampleKey(name, labels));
  if (v === undefined) throw new Error(`metric ${sampleKey(name, labels)} missing`);
  return v;
}

/** The JSON log lines of a process's stderr. */
export function logLines(stderr: string): Record<string, unknown>[] {
  return stderr.split("\n").filter((l) => l.startsWith("{")).map((l) => JSON.parse(l));
}

// ---- a grpc-js client with any credentials -----------------------------

export interface RpcFailure {
  code: number;
  details: string;
}

export type RpcResult = { ok: true; value: Record<string, unknown> } | ({ ok: false } & RpcFailure);

export class RawClient {
  readonly #client: grpc.Client;

  constructor(target: string, creds: grpc.ChannelCredentials, options: grpc.ChannelOptions = {}) {
    const Ctor = capacityProviderCtor();
    this.#client = new Ctor(target, creds, {
      "grpc.use_local_subchannel_pool": 1,
      ...options,
    });
  }

  /** One unary call; a gRPC status becomes `{ok:false}`, never an exception. */
  call(method: string, req: Record<string, unknown>, deadlineMs = 5_000): Promise<RpcResult> {
    const fn = (this.#client as unknown as Record<string, grpc.requestCallback<unknown>>)[method];
    return new Promise((resolve) => {
      (fn as unknown as (...a: unknown[]) => void).call(
        this.#client,
        req,
        new grpc.Metadata(),
        { deadline: new Date(Date.now() + deadlineMs) },
        (err: grpc.ServiceError | null, value: Record<string, unknown>) => {
          if (err) resolve({ ok: false, code: err.code, details: err.details ?? err.message });
          else resolve({ ok: true, value });
        },
      );
    });
  }

  close(): void {
    this.#client.close();
  }
}

export function tlsCreds(caPem: string, client?: { certPem: string; keyPem: string }) {
  return grpc.credentials.createSsl(
    Buffer.from(caPem),
    client ? Buffer.from(client.keyPem) : null,
    client ? Buffer.from(client.certPem) : null,
  );
}

export function lifecycle(machineId: string, shardId: string, epoch: number, seq: number) {
  return {
    machine_id: machineId,
    shard_id: shardId,
    shard_epoch: String(epoch),
    sequence_number: String(seq),
  };
}

// ---- in-process apps ----------------------------------------------------

/** startApp from real flags, on free loopback ports. */
export async function startTestApp(
  flags: string[],
  opts: AppOptions = {},
): Promise<App> {
  const config = await loadConfig([
    "--use-fake-backend",
    "--addr=127.0.0.1:0",
    "--seed-count=8",
    "--reconcile-interval=0",
    ...flags,
  ]);
  return await startApp(config, opts);
}

// ---- helper processes ----------------------------------------------------

const FIXTURE_PERMS = ["--allow-net", "--allow-read", "--allow-env", "--allow-sys"];

/** Spawns tests/server/fixtures/<name>; `lines` fills as it prints, `done` has them all. */
export function spawnFixture(name: string, args: string[], onLine?: (line: string) => void) {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", ...FIXTURE_PERMS, `tests/server/fixtures/${name}`, ...args],
    cwd: REPO_ROOT,
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const lines: string[] = [];
  const stderr = new Response(child.stderr).text();
  const done = (async () => {
    let buf = "";
    for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
      buf += chunk;
      for (let nl = buf.indexOf("\n"); nl >= 0; nl = buf.indexOf("\n")) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        lines.push(line);
        onLine?.(line);
      }
    }
    const status = await child.status;
    return { lines, code: status.code, stderr: await stderr };
  })();
  return { lines, done };
}
