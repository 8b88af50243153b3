// Helpers for the simulator's self-tests: a fetch client bound to the sim's
// CA, a node:https request that exposes the reason phrase, and polling.

import https from "node:https";
import { startSimulator } from "./mod.ts";
import type { SimOptions, Simulator } from "./types.ts";
import { waitFor } from "../harness/time.ts";

/** Runs fn against a fresh simulator and a client for it; closes both. */
export async function withSim(
  fn: (sim: Simulator, api: Api) => Promise<void>,
  opts: SimOptions = {},
): Promise<void> {
  const sim = await startSimulator(opts);
  const api = new Api(sim);
  try {
    await fn(sim, api);
  } finally {
    api.close();
    await sim.close();
  }
}

export interface ApiReply {
  status: number;
  // deno-lint-ignore no-explicit-any
  body: any;
  text: string;
  headers: Headers;
}

export interface CallOptions {
  json?: unknown;
  form?: URLSearchParams | string;
  /** Raw body with an explicit content type. */
  raw?: { body: string; contentType?: string };
  headers?: Record<string, string>;
  /** false: send no Authorization header. */
  auth?: boolean | string;
}

export class Api {
  readonly client: Deno.HttpClient;
  constructor(private sim: Simulator) {
    this.client = Deno.createHttpClient({ caCerts: [sim.caPem] });
  }

  async call(method: string, path: string, o: CallOptions = {}): Promise<ApiReply> {
    const headers: Record<string, string> = { ...o.headers };
    if (o.auth !== false) {
      headers["Authorization"] = typeof o.auth === "string" ? o.auth : this.sim.authHeader;
    }
    let body: string | undefined;
    if (o.json !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(o.json);
    } else if (o.form !== undefined) {
      headers["Content-Type"] = "application/x-www-form-urlencoded";
      body = String(o.form);
    } else if (o.raw) {
      if (o.raw.contentType) headers["Content-Type"] = o.raw.contentType;
      body = o.raw.body;
    }
    const r = await fetch(this.sim.url + path, { method, headers, body, client: this.client });
    const text = await r.text();
    let parsed: unknown = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch { /* plain-text 59x bodies */ }
    return { status: r.status, body: parsed, text, headers: r.headers };
  }

  async data(method: string, path: string, o: CallOptions = {}): Promise<unknown> {
    const r = await this.call(method, path, o);
    if (r.status !== 200) throw new Error(`${method} ${path}: ${r.status} ${r.text}`);
    return r.body.data;
  }

  /** Polls task status until stopped; returns the status object. */
  async waitTask(upid: string, timeoutMs = 5000): Promise<Record<string, unknown>> {
    const node = upid.split(":")[1];
    return await waitFor(`task ${upid} to stop`, async () => {
      const st = await this.data("GET", `/nodes/${node}/tasks/${upid}/status`) as Record<
        string,
        unknown
      >;
      return st.status === "stopped" ? st : undefined;
    }, timeoutMs);
  }

  close(): void {
    this.client.close();
  }
}

/** Polls fn until it returns a truthy value (the suites' one polling helper, tests/harness/time.ts). */
export function until<T>(
  fn: () => T | Promise<T>,
  timeoutMs = 3000,
  what = "the condition",
): Promise<NonNullable<T>> {
  return waitFor(what, async () => (await fn()) || undefined, timeoutMs, 10) as Promise<
    NonNullable<T>
  >;
}

export interface RawReply {
  status: number;
  reason: string;
  body: string;
  headers: Record<string, string | string[] | undefined>;
}

/** A request through node:https, which (unlike fetch) shows the reason phrase. */
export function rawRequest(
  sim: Simulator,
  method: string,
  path: string,
  o: { headers?: Record<string, string>; body?: string; ca?: string } = {},
): Promise<RawReply> {
  return new Promise((resolve, reject) => {
    const req = https.request({
      host: sim.host,
      port: sim.port,
      method,
      path: "/api2/json" + path,
      ca: o.ca ?? sim.caPem,
      headers: {
        Authorization: sim.authHeader,
        ...(o.body !== undefined
          ? { "Content-Length": String(new TextEncoder().encode(o.body).length) }
          : {}),
        ...o.headers,
      },
      agent: false,
    }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => body += c);
      res.on("end", () =>
        resolve({
          status: res.statusCode ?? 0,
          reason: res.statusMessage ?? "",
          body,
          headers: res.headers,
        }));
    });
    req.on("error", reject);
    if (o.body !== undefined) req.write(o.body);
    req.end();
  });
}

/** Clones the default template and waits for the task; returns the new VMID. */
export async function cloneAndWait(
  api: Api,
  body: Record<string, unknown> = {},
  src = { node: "pve1", vmid: 9000 },
): Promise<{ newid: number; upid: string; status: Record<string, unknown> }> {
  const newid = Number(await api.data("GET", "/cluster/nextid"));
  const upid = await api.data("POST", `/nodes/${src.node}/qemu/${src.vmid}/clone`, {
    json: { newid, full: 1, ...body },
  }) as string;
  const status = await api.waitTask(upid);
  return { newid, upid, status };
}

/** Starts a VM and waits until its agent answers. */
export async function startAndBoot(api: Api, node: string, vmid: number): Promise<void> {
  const upid = await api.data("POST", `/nodes/${node}/qemu/${vmid}/status/start`) as string;
  const st = await api.waitTask(upid);
  if (st.exitstatus !== "OK") throw new Error(`start failed: ${st.exitstatus}`);
  await until(async () =>
    (await api.call("GET", `/nodes/${node}/qemu/${vmid}/agent/get-osinfo`)).status === 200
  );
}
