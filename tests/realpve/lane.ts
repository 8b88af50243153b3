// What the lane's tests share: least-privilege tokens made by the real
// deploy/host-setup/setup-token.sh inside the rig (one identity per mode, so
// modes never share roles or pools), the provider's flags against the rig,
// and clean-up of VMs a previous, interrupted run of the lane left behind.

import {
  atExit,
  Harness,
  MachineState,
  type ProviderProcess,
  startProvider,
  waitFor,
} from "../harness/mod.ts";
import { api, destroyVm, exec, REPO, rig, RigApiError, run, runJson } from "./rig.ts";
import { CACHE, laneTemplate, sha256 } from "./template.ts";

export const SETUP = `${REPO}/deploy/host-setup/setup-token.sh`;

export type Mode = "default" | "vlan-tags" | "no-audit-all-vms";

export interface LaneIdentity {
  mode: Mode;
  user: string;
  tokenName: string;
  tokenId: string;
  pool: string;
  prefix: string;
  /** The setup-token.sh options for this mode. */
  args: string[];
  secret: string;
  tokenFile: string;
  /** What setup-token.sh printed (stdout) on the run that made the token. */
  output: string;
}

const IDS: Record<Mode, { user: string; pool: string; prefix: string; extra: string[] }> = {
  "default": { user: "bflane@pve", pool: "bflane", prefix: "BFLane", extra: [] },
  "vlan-tags": {
    user: "bflane-vlan@pve",
    pool: "bflane-vlan",
    prefix: "BFLaneVlan",
    extra: ["--vlan-tags", "10,20"],
  },
  "no-audit-all-vms": {
    user: "bflane-pool@pve",
    pool: "bflane-pool",
    prefix: "BFLanePool",
    extra: ["--no-audit-all-vms"],
  },
};

let dir: string | undefined;
async function laneDir(): Promise<string> {
  if (dir === undefined) {
    const made = dir = await Deno.makeTempDir({ prefix: "bf-realpve-" });
    atExit(() => Deno.removeSync(made, { recursive: true }));
  }
  return dir;
}

/** setup-token.sh's options for a mode (the rig: one `local` storage, template 9100). */
export function setupArgs(mode: Mode): string[] {
  const id = IDS[mode];
  return [
    "--user",
    id.user,
    "--token-name",
    "lane",
    "--pool",
    id.pool,
    "--role-prefix",
    id.prefix,
    "--templates",
    "9100",
    "--storages",
    "local",
    ...id.extra,
  ];
}

/** Run setup-token.sh in the rig with these options. */
export function setupToken(args: string[]) {
  return exec(["sh", SETUP, ...args]);
}

const made = new Map<Mode, Promise<LaneIdentity>>();

/** Whether a token is accepted by the API now. */
async function works(tokenId: string, secret: string): Promise<boolean> {
  try {
    await api("GET", "/version", {}, { id: tokenId, secret });
    return true;
  } catch {
    return false;
  }
}

/**
 * The mode's identity, made by setup-token.sh. `fresh` runs the script (the
 * lane's test of it); otherwise an identity made by this version of the
 * script earlier (another test file: each runs in its own isolate) is reused
 * while its token works, since each run of the script costs ~20 pveum calls.
 * A fresh run removes the token first so the script makes it anew and prints
 * its secret (it keeps an existing token's secret, shown only once).
 */
export function laneIdentity(mode: Mode, o: { fresh?: boolean } = {}): Promise<LaneIdentity> {
  let p = made.get(mode);
  if (p === undefined || o.fresh) {
    p = (async () => {
      await rig();
      await laneTemplate();
      const id = IDS[mode];
      const args = setupArgs(mode);
      const scriptSha = await sha256(await Deno.readTextFile(SETUP) + args.join(" "));
      const cacheFile = `${CACHE}/identity-${mode}.json`;
      const tokenFile = `${await laneDir()}/${id.pool}.token`;
      if (!o.fresh) {
        const old = await Deno.readTextFile(cacheFile).then(JSON.parse).catch(() => null);
        if (
          old?.scriptSha === scriptSha && await works(old.identity.tokenId, old.identity.secret)
        ) {
          await Deno.writeTextFile(tokenFile, `${old.identity.secret}\n`, { mode: 0o600 });
          return { ...old.identity, tokenFile } as LaneIdentity;
        }
      }
      await exec(["pveum", "user", "token", "remove", id.user, "lane"]);
      const r = await setupToken(args);
      if (r.code !== 0) throw new Error(`setup-token.sh ${args.join(" ")}: ${r.stderr}`);
      const secret = /token secret:\s+(\S+)/.exec(r.stdout)?.[1];
      if (!secret) throw new Error(`setup-token.sh printed no secret:\n${r.stdout}`);
      await Deno.writeTextFile(tokenFile, `${secret}\n`, { mode: 0o600 });
      const identity: LaneIdentity = {
        mode,
        user: id.user,
        tokenName: "lane",
        tokenId: `${id.user}!lane`,
        pool: id.pool,
        prefix: id.prefix,
        args,
        secret,
        tokenFile,
        output: r.stdout,
      };
      // The rig's test token, kept 0600 beside the guest image for the other test files.
      await Deno.writeTextFile(cacheFile, JSON.stringify({ scriptSha, identity }), { mode: 0o600 });
      return identity;
    })();
    made.set(mode, p);
  }
  return p;
}

/** The lane's instance type: other cores and memory than the template's 2 / 256. */
export const LANE_TYPE = "lane.tiny";
const CATALOG = JSON.stringify({ [LANE_TYPE]: { vcpu: 1, memory_mib: 320 } });

export interface LaneProviderOptions {
  provider?: string;
  seed?: number;
  /** The template VMID (default: the lane's 9100). */
  template?: number;
  /** Where /metrics listens (default: off). */
  metricsAddr?: string;
  extra?: string[];
}

/** The serving flags for the rig with this identity's token (the compile task's permissions). */
export async function providerFlags(
  id: LaneIdentity,
  o: LaneProviderOptions = {},
): Promise<string[]> {
  const r = await rig();
  const catalog = `${await laneDir()}/catalog.json`;
  await Deno.writeTextFile(catalog, CATALOG);
  return [
    `--provider=${o.provider ?? "lane"}`,
    `--proxmox-api-url=${r.apiUrl}`,
    `--proxmox-token-id=${id.tokenId}`,
    `--proxmox-token-file=${id.tokenFile}`,
    `--proxmox-ca-file=${r.caFile}`,
    `--nodes=${r.node}`,
    `--proxmox-pool=${id.pool}`,
    `--template-vmid=${o.template ?? 9100}`,
    `--instance-types=${catalog}`,
    `--seed-count=${o.seed ?? 4}`,
    `--metrics-addr=${o.metricsAddr ?? ""}`,
    "--reconcile-interval=0",
    ...(o.extra ?? []),
  ];
}

/** A provider process on the rig; its stderr is kept for failure messages. */
export async function startLaneProvider(
  id: LaneIdentity,
  o: LaneProviderOptions = {},
): Promise<ProviderProcess> {
  return await startProvider({ args: await providerFlags(id, o), readyTimeoutMs: 60_000 });
}

/**
 * Destroy what an interrupted earlier run left in the lane's pools (the
 * provider's VMs live only there; the rig is shared, nothing else is touched).
 */
export async function sweepPools(): Promise<number[]> {
  const gone: number[] = [];
  const pools = await api<{ poolid: string }[]>("GET", "/pools");
  for (const { poolid } of pools) {
    if (!Object.values(IDS).some((i) => i.pool === poolid)) continue;
    const p = await api<{ members: { vmid?: number; type: string }[] }>(
      "GET",
      `/pools/${poolid}`,
    );
    for (const m of p.members ?? []) {
      if (m.type !== "qemu" || m.vmid === undefined) continue;
      await destroyVm(m.vmid);
      gone.push(m.vmid);
    }
  }
  return gone;
}

/** A VM's config as the API answers it (what `qm config` prints), or null when there is none. */
export async function qmConfig(vmid: number): Promise<Record<string, string> | null> {
  const r = await rig();
  try {
    const c = await api<Record<string, unknown>>("GET", `/nodes/${r.node}/qemu/${vmid}/config`);
    return Object.fromEntries(Object.entries(c).map(([k, v]) => [k, String(v)]));
  } catch (err) {
    if (err instanceof RigApiError && /does not exist/.test(err.text)) return null;
    throw err;
  }
}

/** The volumes of a VMID on a storage, as pve-storage lists them (`pvesm list`'s source). */
export async function volumesOf(vmid: number, storage = "local"): Promise<string[]> {
  const r = await rig();
  const list = await runJson<{ volid: string }[]>(
    "pvesh",
    "get",
    `/nodes/${r.node}/storage/${storage}/content`,
    "--vmid",
    String(vmid),
  );
  return list.map((v) => v.volid);
}

export { run };

/** The VMID of a host ref `<node>/<vmid>`. */
export function vmidOf(ref: string | undefined): number {
  const m = /^[^/]+\/(\d+)$/.exec(ref ?? "");
  if (!m) throw new Error(`host ref ${ref} is not <node>/<vmid>`);
  return Number(m[1]);
}

/** The i-th seeded machine of the lane's one instance type on the rig's node. */
export function laneMachine(i: number, provider = "lane"): string {
  return `${provider}/OnDemand/${LANE_TYPE}/pve/${String(i).padStart(3, "0")}`;
}

/** Machine id → VMIDs of the VMs in the pool that carry its marker (others: `(VM n)`). */
export async function markersInPool(pool: string): Promise<Map<string, number[]>> {
  const r = await rig();
  const p = await api<{ members: { vmid?: number; type: string }[] }>("GET", `/pools/${pool}`);
  const out = new Map<string, number[]>();
  for (const m of p.members ?? []) {
    if (m.type !== "qemu" || m.vmid === undefined) continue;
    const c = await api<{ description?: string }>("GET", `/nodes/${r.node}/qemu/${m.vmid}/config`);
    const id = /"machine_id":"([^"]+)"/.exec(c.description ?? "")?.[1] ?? `(VM ${m.vmid})`;
    out.set(id, [...out.get(id) ?? [], m.vmid]);
  }
  return out;
}

/** Create to IDLE of a real clone and TCG boot on a busy 2-core machine: a generous bound, polled. */
export const CREATE_MS = 180_000;

/** A machine through Create to IDLE; its VMID. */
export async function createIdle(hs: Harness, id: string): Promise<{ vmid: number }> {
  await hs.create(id);
  const m = await hs.mustReach(id, MachineState.IDLE, CREATE_MS, 100);
  return { vmid: vmidOf(m.host?.ref) };
}

/** Poll `check` (every 250 ms) until it holds; fails naming `what` after `timeoutMs`. */
export async function until(
  check: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string,
): Promise<void> {
  await waitFor(what, check, timeoutMs, 250);
}

/** The datacenter's user-tag-access set to `policy` while `fn` runs (the default after). */
export async function withTagPolicy<T>(policy: string, fn: () => Promise<T>): Promise<T> {
  await run("pvesh", "set", "/cluster/options", "--user-tag-access", policy);
  try {
    return await fn();
  } finally {
    await run("pvesh", "set", "/cluster/options", "--delete", "user-tag-access");
  }
}

/** A test file's one provider, started on first use; `stop` (its last test) ends it. */
export function fileProvider(start: () => Promise<ProviderProcess>) {
  let provider: Promise<ProviderProcess> | undefined;
  let h: Harness | undefined;
  return {
    async get(): Promise<{ hs: Harness; p: ProviderProcess }> {
      provider ??= start();
      const p = await provider;
      h ??= new Harness(p.addr, { seed: 1 });
      return { hs: h, p };
    },
    /** The harness, if the provider was started. */
    started: (): Harness | undefined => h,
    async stop(): Promise<void> {
      h?.close();
      const p = await provider?.catch(() => undefined);
      await p?.stop();
    },
  };
}
