// The real-PVE lane's access to the rig: a single-node Proxmox VE (8.x or 9.x)
// that the script BFREALPVE_UP names brings up (README.md in this folder). It
// decides once whether the lane can run here, brings the rig up once per test
// process, and runs commands inside it (`qm`, `pveum`, `pvesh`, `pvesm`) and
// API calls with the rig's Administrator token (for setup and for reading
// facts; the provider itself only ever gets the least-privilege token).
//
// When the lane cannot run, every lane test is registered as ignored and one
// line says why (`realpve lane skipped: …`); `.ci/run` repeats that line.

import { REPO_ROOT, waitFor } from "../harness/mod.ts";

/** What `up` prints (one JSON line). */
export interface RigInfo {
  apiUrl: string;
  node: string;
  tokenId: string;
  tokenSecretFile: string;
  caFile: string;
  fingerprint: string;
  templateVmid: number;
  exec: string;
  dir: string;
  version: string;
}

export interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

/** The `up` script BFREALPVE_UP names (README.md in this folder), or null. */
function findUp(): string | null {
  const up = Deno.env.get("BFREALPVE_UP");
  return up === undefined || up === "" ? null : up;
}

/** Why the lane cannot run here, or null when it can. */
function whySkip(up: string | null): string | null {
  const env = Deno.env.get("BFREALPVE");
  if (env === "0" || env === "off") return `BFREALPVE=${env}`;
  if (up === null) {
    return "no real Proxmox VE given (set BFREALPVE_UP to a script that prints the rig JSON: " +
      "tests/realpve/README.md)";
  }
  try {
    if (!Deno.statSync(up).isFile) return `BFREALPVE_UP=${up} is not a file`;
  } catch {
    return `BFREALPVE_UP=${up} does not exist`;
  }
  return null;
}

const UP = findUp();
/** Set in this process's environment once the skip line was printed. */
const SAID = "BFREALPVE_SKIP_SAID";
/** Why every lane test is skipped; null when the lane runs. */
export const SKIP: string | null = whySkip(UP);
if (SKIP !== null && Deno.env.get(SAID) === undefined) {
  // Each test file runs in its own isolate of the one `deno test` process, and
  // they share the environment: say it once.
  Deno.env.set(SAID, "1");
  console.log(`realpve lane skipped: ${SKIP}`);
}

/** Lane tests: `realpve: ` names (`.ci/run` counts them), ignored with the reason when the lane cannot run. */
export function laneTest(name: string, fn: () => Promise<void>): void {
  Deno.test({
    name: `realpve: ${name}`,
    ignore: SKIP !== null,
    // The rig, provider processes and pumps outlive single tests by design.
    sanitizeOps: false,
    sanitizeResources: false,
    fn,
  });
}

let upOnce: Promise<RigInfo> | undefined;

/** Bring the rig up (once per process; `up` is idempotent and quick when it is up). */
export function rig(): Promise<RigInfo> {
  return upOnce ??= (async () => {
    if (UP === null) throw new Error("realpve: no up script");
    const out = await new Deno.Command(UP, { stdout: "piped", stderr: "piped" }).output();
    const dec = new TextDecoder();
    if (!out.success) {
      throw new Error(`realpve up failed (exit ${out.code}): ${dec.decode(out.stderr).trim()}`);
    }
    const line = dec.decode(out.stdout).trim().split("\n").at(-1) ?? "";
    return JSON.parse(line) as RigInfo;
  })();
}

/** Run a command inside the rig (root, the rig's namespace). */
export async function exec(args: string[], stdin?: string): Promise<Ran> {
  const r = await rig();
  const child = new Deno.Command(r.exec, {
    args,
    stdin: stdin === undefined ? "null" : "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  if (stdin !== undefined) {
    const w = child.stdin.getWriter();
    await w.write(new TextEncoder().encode(stdin));
    await w.close();
  }
  const out = await child.output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

/** Like `exec`, but a non-zero exit throws with the command and its stderr. */
export async function run(...args: string[]): Promise<string> {
  const r = await exec(args);
  if (r.code !== 0) {
    throw new Error(`rig: ${args.join(" ")} exited ${r.code}: ${r.stderr.trim() || r.stdout}`);
  }
  return r.stdout;
}

/** `run` for commands with `--output-format json`. */
export async function runJson<T = unknown>(...args: string[]): Promise<T> {
  return JSON.parse(await run(...args, "--output-format", "json")) as T;
}

export class RigApiError extends Error {
  constructor(readonly status: number, readonly text: string, what: string) {
    super(`${what}: HTTP ${status} ${text}`);
  }
}

let client: Deno.HttpClient | undefined;

/**
 * One API call as the given token (default: the rig's Administrator token).
 * Form-encoded like PVE's own clients; the `data` of the answer, or a RigApiError.
 */
export async function api<T = unknown>(
  method: string,
  path: string,
  params: Record<string, string | number | string[]> = {},
  token?: { id: string; secret: string },
): Promise<T> {
  const r = await rig();
  client ??= Deno.createHttpClient({ caCerts: [await Deno.readTextFile(r.caFile)] });
  const secret = token?.secret ?? (await Deno.readTextFile(r.tokenSecretFile)).trim();
  const form = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    for (const one of Array.isArray(v) ? v : [v]) form.append(k, String(one));
  }
  const get = method === "GET" || method === "DELETE";
  const url = `${r.apiUrl}${path}${get && form.size > 0 ? `?${form}` : ""}`;
  const res = await fetch(url, {
    method,
    client,
    headers: {
      Authorization: `PVEAPIToken=${token?.id ?? r.tokenId}=${secret}`,
      ...(get ? {} : { "Content-Type": "application/x-www-form-urlencoded" }),
    },
    body: get ? undefined : form.toString(),
  });
  const text = await res.text();
  if (!res.ok) {
    let msg = res.statusText;
    try {
      const j = JSON.parse(text);
      if (typeof j?.message === "string") msg = j.message.trim();
    } catch { /* plain text */ }
    throw new RigApiError(res.status, msg, `${method} ${path}`);
  }
  return (JSON.parse(text) as { data: T }).data;
}

/** Wait for a task (UPID) to stop; its exit status (`OK`, `WARNINGS: n` or the error). */
export async function waitTask(upid: string, timeoutMs = 120_000): Promise<string> {
  const r = await rig();
  const path = `/nodes/${r.node}/tasks/${encodeURIComponent(upid)}/status`;
  return await waitFor(
    `task ${upid} to stop`,
    async () => {
      const st = await api<{ status: string; exitstatus?: string }>("GET", path);
      return st.status === "stopped" ? st.exitstatus ?? "" : undefined;
    },
    timeoutMs,
    250,
  );
}

/** A task's log lines. */
export async function taskLog(upid: string): Promise<string[]> {
  const r = await rig();
  const lines = await api<{ n: number; t: string }[]>(
    "GET",
    `/nodes/${r.node}/tasks/${encodeURIComponent(upid)}/log`,
    { limit: 1000 },
  );
  return lines.map((l) => l.t);
}

/** VMIDs on the rig's node (the rig is shared: never assume the list is empty). */
export async function vmids(): Promise<number[]> {
  const r = await rig();
  const vms = await api<{ vmid: number }[]>("GET", `/nodes/${r.node}/qemu`);
  return vms.map((v) => Number(v.vmid));
}

/** Stop and destroy a VM this lane made, disks included; a VM already gone is fine. */
export async function destroyVm(vmid: number): Promise<void> {
  const r = await rig();
  const path = `/nodes/${r.node}/qemu/${vmid}`;
  let config: Record<string, unknown>;
  try {
    config = await api("GET", `${path}/config`);
  } catch (err) {
    if (err instanceof RigApiError && /does not exist/.test(err.text)) return;
    throw err;
  }
  if (config.lock) await run("qm", "unlock", String(vmid)); // only root@pam may
  if (Number(config.protection ?? 0) === 1) await api("PUT", `${path}/config`, { protection: 0 });
  const st = await api<{ status: string }>("GET", `${path}/status/current`);
  if (st.status !== "stopped") await waitTask(await api<string>("POST", `${path}/status/stop`));
  const exit = await waitTask(
    await api<string>("DELETE", path, { purge: 1, "destroy-unreferenced-disks": 1 }),
  );
  if (exit !== "OK") throw new Error(`rig: destroy of ${vmid} ended ${exit}`);
}

/** Run argv in a VM's guest through the agent (API, Administrator token); exit code and output. */
export async function guestExec(vmid: number, argv: string[], timeoutMs = 60_000): Promise<Ran> {
  const r = await rig();
  const base = `/nodes/${r.node}/qemu/${vmid}/agent`;
  const { pid } = await api<{ pid: number }>("POST", `${base}/exec`, { command: argv });
  return await waitFor(
    `guest exec ${argv.join(" ")} in ${vmid} to exit`,
    async () => {
      const st = await api<Record<string, unknown>>("GET", `${base}/exec-status`, { pid });
      if (!st.exited) return undefined;
      return {
        code: Number(st.exitcode ?? -1),
        stdout: String(st["out-data"] ?? ""),
        stderr: String(st["err-data"] ?? ""),
      };
    },
    timeoutMs,
    100,
  );
}

/** The repository path as the rig sees it (the rig shares the host's file system). */
export const REPO = REPO_ROOT.replace(/\/+$/, "");

let major: Promise<number> | undefined;

/** The rig's Proxmox VE major version (8 or 9), from `GET /version`. */
export function pveMajor(): Promise<number> {
  return major ??= (async () => {
    const v = await api<{ version?: string }>("GET", "/version");
    const m = /^(\d+)\./.exec(String(v.version ?? ""));
    if (m === null) throw new Error(`realpve: unreadable /version ${JSON.stringify(v)}`);
    return Number(m[1]);
  })();
}

/** Whether the rig's package `pkg` is at least `version` (dpkg's own comparison, in the rig). */
export async function packageAtLeast(pkg: string, version: string): Promise<boolean> {
  const have = (await run("dpkg-query", "-W", "-f=${Version}", pkg)).trim();
  return (await exec(["dpkg", "--compare-versions", have, "ge", version])).code === 0;
}
