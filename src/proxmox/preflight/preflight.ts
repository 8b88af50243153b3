// The checks behind `preflight` (docs/cli.md#preflight): against the cluster
// the flags name, with the same code the backend runs (TLS trust, node list,
// template lookup, clone reachability, storage.cfg), and only ever reading:
// the client handed to every check refuses anything but GET. The command
// (src/cli/preflight.ts) runs them and reports what they found.

import type { Config, InstanceType, ProxmoxConfig } from "../../config/types.ts";
import { apiClientFor } from "../api/connect.ts";
import { DEFAULT_TIMING, newContext, type ProxmoxContext, type Timing } from "../context.ts";
import { ProxmoxApiError, TlsTrustError } from "../api/errors.ts";
import type { ApiClient } from "../api/client.ts";
import { parseTags } from "../naming.ts";
import { clusterNodes } from "../cluster/nodes.ts";
import { checkPrivileges, Permissions, sdnNeeds } from "./privileges.ts";
import { type CheckResult, failed, gib, pass, plural, skipped, warn } from "./result.ts";
import { checkTags } from "./tags.ts";
import {
  auditAllNeed,
  type PathNeed,
  poolNeed,
  rootOnlyDevices,
  storageNeed,
  templateNeed,
  templateOptionNeeds,
} from "./needs.ts";
import {
  cloneBlocker,
  findTemplate,
  readStorages,
  type StorageInfo,
  TemplateProblem,
  type TemplateRef,
  templateVolumes,
} from "../cluster/templates.ts";
import { probeTrust } from "../api/tls.ts";
import { isPermissionError, type VmConfig } from "../vm/vm.ts";

export interface PreflightReport {
  results: CheckResult[];
  /** pve-manager version the API reported, when it was reached. */
  pveVersion: string | null;
}

export interface PreflightOptions {
  /** Bound of the whole run. */
  deadlineMs: number;
}

/** Checks after the connection, in the order they are printed. */
const LATER_CHECKS = ["node", "pool", "privileges", "tags", "template", "storage", "hooks"];

const TRUST_FIX = "--proxmox-ca-file must hold the CA that signed the API's certificate " +
  "(/etc/pve/pve-root-ca.pem for the certificate Proxmox made itself; a custom or ACME one, " +
  "/etc/pve/local/pveproxy-ssl.pem, has its own CA), or pin the certificate the node serves " +
  "with --proxmox-tls-fingerprint (openssl x509 -in /etc/pve/local/pveproxy-ssl.pem, or " +
  "pve-ssl.pem when there is none, -noout -fingerprint -sha256); " +
  "docs/credentials.md#tls-trust-for-the-proxmox-api";
const REACH_FIX = "check --proxmox-api-url (https://HOST:8006/api2/json), that HOST resolves, " +
  "and that this host may reach the port (firewalls, Kubernetes NetworkPolicies)";
const TOKEN_FIX = "check --proxmox-token-id and the secret in --proxmox-token-file (as " +
  "setup-token.sh printed them); a rotated or expired token needs its new secret " +
  "(docs/credentials.md#rotating-the-token)";

/** A client that only reads: preflight never creates, changes or deletes anything. */
function readOnly(api: ApiClient): ApiClient {
  const refuse = (method: string) => (path: string) =>
    Promise.reject(new Error(`preflight never sends ${method} ${path}`));
  return {
    get: (path, query, signal, opts) => api.get(path, query, signal, opts),
    post: refuse("POST"),
    put: refuse("PUT"),
    del: refuse("DELETE"),
    close: () => api.close(),
  };
}

function errText(err: unknown): string {
  if (err instanceof DOMException && (err.name === "TimeoutError" || err.name === "AbortError")) {
    return "no answer in time";
  }
  return (err instanceof Error ? err.message : String(err)).split("\n")[0];
}

function notRun(checks: readonly string[], why: string): CheckResult[] {
  return checks.map((c) => skipped(c, "", `not checked: ${why}`, null));
}

interface Connection {
  results: CheckResult[];
  api: ApiClient | null;
  version: string | null;
}

/** API reachable and trusted (no request before the certificate verifies), then the token. */
async function connect(
  px: ProxmoxConfig,
  timing: Timing,
  signal: AbortSignal,
): Promise<Connection> {
  const url = new URL(px.apiUrl);
  const trustedBy = [
    px.caPem !== null ? "--proxmox-ca-file" : "",
    px.fingerprint !== null ? "the pinned --proxmox-tls-fingerprint" : "",
  ].filter((x) => x !== "").join(" and ");
  const stop = (first: CheckResult[], why: string): Connection => ({
    results: [...first, ...notRun(LATER_CHECKS, why)],
    api: null,
    version: null,
  });
  try {
    const probe = AbortSignal.any([signal, AbortSignal.timeout(timing.probeTimeoutMs)]);
    await probeTrust(url, { caPem: px.caPem, fingerprint: px.fingerprint }, probe);
  } catch (err) {
    const token = skipped("token", px.tokenId, "not checked: nothing was sent to the API", null);
    if (err instanceof TlsTrustError) {
      return stop([
        failed(
          "api",
          px.apiUrl,
          `${errText(err)}; nothing was sent, so the token never left this host`,
          TRUST_FIX,
        ),
        token,
      ], "the API's certificate is not trusted");
    }
    return stop(
      [failed("api", px.apiUrl, `cannot connect: ${errText(err)}`, REACH_FIX), token],
      "the API cannot be reached",
    );
  }
  const api = readOnly(apiClientFor(px, timing));
  let answer: unknown;
  try {
    answer = await api.get("/version", undefined, signal);
  } catch (err) {
    api.close();
    const reached = pass(
      "api",
      px.apiUrl,
      `reachable; its certificate verifies against ${trustedBy}`,
    );
    if (err instanceof ProxmoxApiError && err.status === 401) {
      return stop(
        [reached, failed("token", px.tokenId, `refused by the API: ${errText(err)}`, TOKEN_FIX)],
        "the token is not accepted",
      );
    }
    return stop([
      failed(
        "api",
        px.apiUrl,
        `the certificate verifies, but GET /version failed: ${errText(err)}`,
        "--proxmox-api-url must be the API's base URL, https://HOST:8006/api2/json",
      ),
      skipped("token", px.tokenId, "not checked: the API did not answer", null),
    ], "the API did not answer");
  }
  const version = String((answer as Record<string, unknown> | null)?.version ?? "unknown");
  return {
    results: [
      pass("api", px.apiUrl, `reachable; its certificate verifies against ${trustedBy}`),
      pass("token", px.tokenId, `accepted (Proxmox VE ${version})`),
    ],
    api,
    version,
  };
}

/** Run every check against the cluster `cfg` names (cfg.proxmox must be set). */
export async function runPreflight(cfg: Config, opts: PreflightOptions): Promise<PreflightReport> {
  const px = cfg.proxmox!;
  const signal = AbortSignal.timeout(opts.deadlineMs);
  const timing: Timing = {
    ...DEFAULT_TIMING,
    requestTimeoutMs: Math.min(30_000, opts.deadlineMs),
    readAttempts: 2,
    retryBaseMs: 250,
    probeTimeoutMs: Math.min(15_000, opts.deadlineMs),
  };
  const conn = await connect(px, timing, signal);
  if (conn.api === null) return { results: conn.results, pveVersion: null };
  try {
    const run = new Checks(cfg, px, conn.api, timing, signal, conn.version ?? "");
    return { results: [...conn.results, ...await run.all()], pveVersion: conn.version };
  } finally {
    conn.api.close();
  }
}

/** One (instance type, zone) the offerings use, and how many slots it has. */
interface Pair {
  type: InstanceType;
  zone: string;
  count: number;
}

/** A pair whose template was found, for the storage and privilege checks. */
interface Found extends Pair {
  tmpl: TemplateRef & { config: VmConfig };
  /** Its template can be cloned into the zone (its disks count against a storage). */
  clonable: boolean;
}

class Checks {
  readonly #ctx: ProxmoxContext;
  readonly #perms: Permissions;
  readonly #major: number;
  #storages: Promise<Map<string, StorageInfo>> | null = null;

  constructor(
    readonly cfg: Config,
    readonly px: ProxmoxConfig,
    readonly api: ApiClient,
    timing: Timing,
    readonly signal: AbortSignal,
    version: string,
  ) {
    this.#ctx = newContext(api, px.nodes, timing);
    this.#perms = new Permissions(api, signal);
    const major = Number(version.split(".")[0]);
    this.#major = Number.isInteger(major) && major > 0 ? major : 8;
  }

  async all(): Promise<CheckResult[]> {
    const nodes = await this.#guard("node", this.px.nodes.join(","), () => this.nodes());
    const usable = new Set(
      this.px.nodes.filter((n) => !nodes.some((r) => r.subject === n && r.status === "FAIL")),
    );
    const pool = await this.#guard("pool", this.px.pool || "(none)", () => this.pool());
    const found: Found[] = [];
    const templates = await this.#guard("template", "", () => this.templates(usable, found));
    const demand = await this.#demand(found);
    const storage = await this.#guard("storage", "", () => this.storage(demand));
    const privileges = await this.#guard(
      "privileges",
      "",
      () => this.privileges(found, [...demand.values()]),
    );
    const tagSubject = this.px.tags.join(",") || "(none)";
    const tags = await this.#guard("tags", tagSubject, async () => {
      const inherited = [...new Set(found.flatMap((f) => parseTags(f.tmpl.config.tags)))].sort();
      return [await checkTags(this.api, this.#perms, this.px.tags, inherited, this.signal)];
    });
    return [...nodes, ...pool, ...privileges, ...tags, ...templates, ...storage, this.hooks()];
  }

  /** A check that throws becomes one FAIL line; after the deadline, a SKIP. */
  async #guard(
    check: string,
    subject: string,
    fn: () => Promise<CheckResult[]>,
  ): Promise<CheckResult[]> {
    if (this.signal.aborted) return [skipped(check, subject, "not checked: out of time", null)];
    try {
      return await fn();
    } catch (err) {
      if (this.signal.aborted) {
        return [failed(check, subject, "did not finish in time", "raise --timeout")];
      }
      return [failed(
        check,
        subject,
        `could not check: ${errText(err)}`,
        "fix what the error names and run preflight again",
      )];
    }
  }

  #cachedStorages(): Promise<Map<string, StorageInfo>> {
    if (this.#storages === null) {
      const p = readStorages(this.api, this.signal);
      // A failed read is not kept: its callers get the error, the next call reads again.
      p.catch(() => this.#storages = null);
      this.#storages = p;
    }
    return this.#storages;
  }

  /** Every --nodes entry is a node of this cluster and online (or, while unreported, answering). */
  async nodes(): Promise<CheckResult[]> {
    const status = await clusterNodes(this.api, this.signal);
    const known = [...status.keys()].sort().join(", ");
    return await Promise.all(this.px.nodes.map(async (n) => {
      const s = status.get(n);
      if (s === undefined) {
        return failed(
          "node",
          n,
          `not a node of this cluster (it has ${known || "none the token can see"})`,
          "correct --nodes (chart: proxmox.nodes) to the names `pvesh get /nodes` shows",
        );
      }
      if (s === "unknown") return await this.unreportedNode(n);
      if (s !== "online") {
        return failed(
          "node",
          n,
          `${s}: every Create in zone ${n} fails while it is`,
          `bring ${n} back into the cluster, or take it out of --nodes and the offerings`,
        );
      }
      return pass("node", n, "online");
    }));
  }

  /**
   * A node listed `unknown` has sent the cluster no status figures yet (its
   * pvestatd: just started, stopped or stuck), which says nothing of its API
   * (docs/proxmox-notes.md "A node that is down"): ask the node itself.
   */
  async unreportedNode(n: string): Promise<CheckResult> {
    const fix = `if it stays so, check pvestatd on ${n} (systemctl status pvestatd)`;
    try {
      await this.api.get(`/nodes/${encodeURIComponent(n)}/version`, undefined, this.signal, {
        attempts: 1,
      });
    } catch (err) {
      return failed(
        "node",
        n,
        `status unknown, and it does not answer (${(err as Error).message}): every Create in ` +
          `zone ${n} fails while it does not`,
        `bring ${n} back, or take it out of --nodes and the offerings; ${fix}`,
      );
    }
    return warn(
      "node",
      n,
      "answers, but the cluster has no status figures from it yet (its pvestatd has not " +
        "reported: just started, or stopped)",
      `run preflight again in a minute; ${fix}`,
    );
  }

  /** The pool exists (a missing pool is a 403 on clone, not a clear error). */
  async pool(): Promise<CheckResult[]> {
    const pool = this.px.pool;
    if (pool === "") {
      return [warn(
        "pool",
        "(none)",
        "no --proxmox-pool: clones are created outside any pool, so the token needs its VM " +
          "rights on /vms, propagated (see the privileges check)",
        "create a pool for the provider's VMs and run with --proxmox-pool (chart: proxmox.pool); " +
          "setup-token.sh --pool POOL creates it and grants the rights on it",
      )];
    }
    const list = await this.api.get<unknown[]>("/pools", undefined, this.signal);
    if (
      (Array.isArray(list) ? list : []).some((e) => (e as { poolid?: unknown })?.poolid === pool)
    ) {
      return [pass("pool", pool, "exists")];
    }
    const audit = (await this.#perms.at(`/pool/${pool}`)).has("Pool.Audit");
    return [failed(
      "pool",
      pool,
      audit
        ? "does not exist: every clone would be refused (403 pool does not exist)"
        : `not visible to the token: it does not exist, or the token lacks Pool.Audit on /pool/${pool}`,
      audit
        ? `create it (pveum pool add ${pool}, or setup-token.sh --pool ${pool}), or correct --proxmox-pool`
        : `create it or correct --proxmox-pool; setup-token.sh --pool ${pool} creates it and grants Pool.Audit`,
    )];
  }

  /** The (instance type, zone) pairs the offerings use, with their slot counts. */
  #pairs(): Pair[] {
    const pairs = new Map<string, Pair>();
    for (const o of this.cfg.offerings) {
      const key = `${o.instanceType}\u0000${o.zone}`;
      const had = pairs.get(key);
      if (had) {
        had.count += o.count;
        continue;
      }
      const type = this.cfg.catalog.get(o.instanceType);
      if (type !== undefined) pairs.set(key, { type, zone: o.zone, count: o.count });
    }
    return [...pairs.values()];
  }

  /** Each offering's template: exists, is a template, has the agent, can be cloned to its zone. */
  async templates(usable: ReadonlySet<string>, found: Found[]): Promise<CheckResult[]> {
    const out: CheckResult[] = [];
    for (const pair of this.#pairs()) {
      const subject = `${pair.type.name}/${pair.zone}`;
      if (!usable.has(pair.zone)) {
        out.push(skipped(
          "template",
          subject,
          `not checked: node ${pair.zone} failed its check`,
          null,
        ));
        continue;
      }
      out.push(
        ...await this.#guard("template", subject, () => this.#template(pair, subject, found)),
      );
    }
    return out;
  }

  async #template(pair: Pair, subject: string, found: Found[]): Promise<CheckResult[]> {
    let tmpl: TemplateRef;
    try {
      tmpl = await findTemplate(this.#ctx, pair.type.template, pair.zone, this.signal);
    } catch (err) {
      if (err instanceof TemplateProblem) {
        return [failed("template", subject, err.message, templateFix(err))];
      }
      if (isPermissionError(err)) {
        return [failed(
          "template",
          subject,
          `cannot read the template: ${errText(err)}`,
          "grant the token VM.Audit and VM.Clone on each template (setup-token.sh --templates VMID,...)",
        )];
      }
      throw err;
    }
    const { vmid, node, config } = tmpl;
    const where = `VM ${vmid} on ${node}`;
    if (config === null) {
      return [failed(
        "template",
        subject,
        `${where} is listed, but its config cannot be read`,
        `grant the token VM.Audit on /vms/${vmid} (setup-token.sh --templates ${vmid})`,
      )];
    }
    const record: Found = { ...pair, tmpl: { vmid, node, config }, clonable: true };
    found.push(record);
    if (Number(config.template ?? 0) !== 1) {
      return [failed(
        "template",
        subject,
        `${where} is not a template`,
        `finish building it and convert it with qm template ${vmid} (docs/templates.md), or ` +
          `point the instance type at the template`,
      )];
    }
    const rootOnly = rootOnlyDevices(config);
    if (rootOnly.length > 0) {
      const { key, kind } = rootOnly[0];
      return [failed(
        "template",
        subject,
        `${where}: ${key} passes a host ${kind} device through: only root@pam may clone it`,
        `map the device (Datacenter > Resource Mappings) and set ${key} to mapping=<name> in ` +
          `the template; the token then needs Mapping.Use on /mapping/${kind.toLowerCase()}/<name>`,
      )];
    }
    let reach = "on the zone's own node";
    if (node !== pair.zone) {
      const blocker = cloneBlocker(config, await this.#cachedStorages(), pair.zone);
      if (blocker !== null) {
        record.clonable = false;
        return [failed(
          "template",
          subject,
          `${where} cannot be cloned to ${pair.zone}: ${blocker}`,
          `give ${pair.zone} a template of its own (a per-zone template_vmid in the catalog, ` +
            `--template-vmid ${node}=${vmid},${pair.zone}=VMID, or --template-name) or move the ` +
            `template's volumes to shared storage ` +
            `(docs/configuration.md#templates-one-per-node-or-one-on-shared-storage)`,
        )];
      }
      reach = `clones to ${pair.zone} (every volume on shared storage)`;
    }
    const what = `${where}: a template with the guest agent enabled; ${reach}`;
    const lock = config.lock;
    if (typeof lock === "string" && lock !== "") {
      return [warn(
        "template",
        subject,
        `${what}; but locked (${lock}): Creates wait until the lock is gone`,
        `let the ${lock} finish, or remove a stale lock with qm unlock ${vmid}`,
      )];
    }
    return [pass("template", subject, what)];
  }

  /** Disk bytes the offerings' clones need, per storage (per node for a local one). */
  async #demand(found: readonly Found[]): Promise<Map<string, Demand>> {
    const out = new Map<string, Demand>();
    if (!found.some((f) => f.clonable)) return out;
    // Unreadable, every storage counts as local (the stricter bound); the template check that
    // reads it too reports the error.
    const storages = await this.#cachedStorages().catch(() => new Map<string, StorageInfo>());
    for (const f of found.filter((x) => x.clonable)) {
      for (const v of templateVolumes(f.tmpl.config)) {
        const value = String(f.tmpl.config[v.key]);
        // A CD-ROM (an ISO, the cloud-init drive) is referenced or regenerated, not copied.
        if (v.storage === null || /(^|,)media=cdrom(,|$)/.test(value)) continue;
        const shared = storages.get(v.storage)?.shared ?? false;
        const key = shared ? v.storage : `${v.storage}\u0000${f.zone}`;
        const d = out.get(key) ?? {
          storage: v.storage,
          node: f.zone,
          shared,
          bytes: 0,
          clones: new Map<string, number>(),
        };
        d.bytes += diskBytes(value) * f.count;
        d.clones.set(`${f.type.name}/${f.zone}`, f.count);
        out.set(key, d);
      }
    }
    return out;
  }

  /** Each storage the clones land on has room for every slot's disks. */
  async storage(demand: ReadonlyMap<string, Demand>): Promise<CheckResult[]> {
    const out: CheckResult[] = [];
    for (const d of demand.values()) {
      const subject = d.shared ? d.storage : `${d.storage} on ${d.node}`;
      out.push(...await this.#guard("storage", subject, () => this.#room(d, subject)));
    }
    return out;
  }

  async #room(d: Demand, subject: string): Promise<CheckResult[]> {
    let st: Record<string, unknown>;
    try {
      st = await this.api.get(
        `/nodes/${d.node}/storage/${d.storage}/status`,
        undefined,
        this.signal,
      );
    } catch (err) {
      return [warn(
        "storage",
        subject,
        `cannot read its free space: ${errText(err)}`,
        isPermissionError(err)
          ? `grant the token Datastore.Audit on /storage/${d.storage} (setup-token.sh --storages ${d.storage})`
          : `check the storage with pvesm status on ${d.node}`,
      )];
    }
    const clones = [...d.clones.values()].reduce((a, b) => a + b, 0);
    const who = [...d.clones].map(([k, n]) => `${k}: ${n}`).join(", ");
    if (Number(st?.active ?? 1) === 0) {
      return [failed(
        "storage",
        subject,
        `not active on ${d.node}, where ${plural(clones, "clone")} would go (${who})`,
        `bring it online (pvesm status on ${d.node})`,
      )];
    }
    const avail = Number(st?.avail);
    if (!Number.isFinite(avail)) {
      return [
        warn("storage", subject, "its status shows no free space", "check it with pvesm status"),
      ];
    }
    const need = `${plural(clones, "clone")} (${who}) need ${gib(d.bytes)} of disks`;
    if (d.bytes > avail) {
      return [failed(
        "storage",
        subject,
        `too small: ${need}, only ${gib(avail)} free`,
        `free space on ${d.storage}, lower the offerings' counts there, or put the template's disks ` +
          `on a bigger storage (thin pools such as lvmthin, zfs or rbd hold more until the guests ` +
          `fill their disks)`,
      )];
    }
    return [pass("storage", subject, `${need}; ${gib(avail)} free`)];
  }

  /** Every privilege the provider will use, on every path it will use it. */
  async privileges(found: readonly Found[], demand: readonly Demand[]): Promise<CheckResult[]> {
    const needs: PathNeed[] = [poolNeed(this.px.pool, this.#major)];
    if (this.px.pool !== "") needs.push(auditAllNeed());
    const vmids = new Set<number>(found.map((f) => f.tmpl.vmid));
    for (const p of this.#pairs()) {
      const src = p.type.template;
      if (src.kind === "vmid") vmids.add(src.vmid);
      if (src.kind === "per-zone" && src.vmids.has(p.zone)) vmids.add(src.vmids.get(p.zone)!);
    }
    for (const vmid of [...vmids].sort((a, b) => a - b)) needs.push(templateNeed(vmid));
    // What the templates' own options make clone check (a host CD-ROM, mapped devices, ...).
    for (const [vmid, config] of new Map(found.map((f) => [f.tmpl.vmid, f.tmpl.config]))) {
      needs.push(...templateOptionNeeds(vmid, config));
    }
    for (const s of [...new Set(demand.map((d) => d.storage))].sort()) needs.push(storageNeed(s));
    // SDN.Use on the NICs' bridges is checked by clone since PVE 8.
    if (this.#major >= 8) {
      const configs = [...new Map(found.map((f) => [f.tmpl.vmid, f.tmpl.config])).values()];
      needs.push(...await sdnNeeds(configs, this.#perms));
    }
    try {
      return await checkPrivileges(needs, this.#perms, this.px.tokenId, this.#major);
    } catch (err) {
      if (this.signal.aborted) throw err;
      return [warn(
        "privileges",
        "",
        `could not read the token's permissions (GET /access/permissions): ${errText(err)}`,
        "check the privileges by hand against docs/credentials.md#privileges-and-why-each-is-needed",
      )];
    }
  }

  /** The hooks live inside the template's disk; a template never runs. */
  hooks(): CheckResult {
    const exec = [...this.cfg.bootstrapExec, this.cfg.bootstrapPath].join(" ");
    return skipped(
      "hooks",
      exec,
      "not checked: the bootstrap hook (run as `" + exec + "`) and kubectl (for Drain) live " +
        "inside the templates, and a template never runs, so its guest agent cannot be asked; " +
        "preflight starts nothing",
      "check them when building the template (docs/templates.md), or on a clone: " +
        "qm guest exec <vmid> -- test -x <path>",
    );
  }
}

interface Demand {
  storage: string;
  /** Where the clones land (the node asked for the storage's status). */
  node: string;
  shared: boolean;
  bytes: number;
  /** instance type/zone → clones. */
  clones: Map<string, number>;
}

/** `size=32G` of a drive (K/M/G/T are powers of 1024; bare is bytes); 0 when absent. */
export function diskBytes(drive: string): number {
  const m = /(?:^|,)size=(\d+(?:\.\d+)?)([KMGT]?)(?:,|$)/.exec(drive);
  if (!m) return 0;
  const power = { "": 0, K: 1, M: 2, G: 3, T: 4 }[m[2]] ?? 0;
  return Math.round(Number(m[1]) * 1024 ** power);
}

function templateFix(err: TemplateProblem): string {
  const vmid = /VM (\d+)/.exec(err.message)?.[1] ?? "VMID";
  switch (err.kind) {
    case "agent":
      return `enable it: qm set ${vmid} --agent enabled=1, with qemu-guest-agent installed in ` +
        "the guest (docs/templates.md)";
    case "missing":
      return "build the template (docs/templates.md) or point the instance type at an existing " +
        "one: template_vmid or template_name in the catalog, --template-vmid or --template-name";
    case "ambiguous":
      return "keep one template of that name per node, or name the templates by VMID " +
        "(--template-vmid NODE=VMID,...)";
    case "unconfigured":
      return "name a template for this zone (template_vmid per zone in the catalog, or " +
        "--template-vmid NODE=VMID,...)";
    default:
      return "see docs/templates.md";
  }
}
