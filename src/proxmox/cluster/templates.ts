// Which template a machine of (instance type, zone) is cloned from, and
// whether it can be cloned there. Proxmox refuses a clone onto another node
// than the template's unless every volume of the template (disks, CD-ROM
// ISOs, the cloud-init drive) is on shared storage (docs/proxmox-notes.md
// "Templates and storage"), so the answer depends on the template's
// config and the cluster's storage.cfg. Used by Create, by the startup check
// (checkOfferingTemplates) and by the preflight command (src/proxmox/preflight/).

import { getLogger } from "@logtape/logtape";
import type { InstanceType, TemplateSource } from "../../config/types.ts";
import { BackendError } from "../../kit/backend.ts";
import { agentEnabled } from "../vm/agent.ts";
import type { ProxmoxContext } from "../context.ts";
import { isPermissionError, listResources, readConfig, type VmConfig, vmOf } from "../vm/vm.ts";
import type { ApiClient } from "../api/client.ts";
import { driveVolumes } from "../vm/drives.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/** What is wrong with a template, for callers that advise a fix (the preflight command). */
export type TemplateProblemKind = "missing" | "ambiguous" | "agent" | "unconfigured" | "other";

/** A definite answer that a template is unusable (missing, ambiguous, unreachable zone...). */
export class TemplateProblem extends BackendError {
  override name = "TemplateProblem";
  constructor(message: string, readonly kind: TemplateProblemKind = "other") {
    super(message);
  }
}

/** The template found for one zone: where it lives and its config (null when unreadable). */
export interface TemplateRef {
  vmid: number;
  node: string;
  config: VmConfig | null;
}

/** One storage.cfg entry as `GET /storage` shows it. */
export interface StorageInfo {
  shared: boolean;
  /** storage.cfg `nodes`; undefined = every node. */
  nodes?: string[];
  /** The storage type (`dir`, `lvmthin`, `rbd`, …); undefined when not listed. */
  type?: string;
  /** What it holds (`images`, `iso`, …); undefined when not listed. */
  content?: string[];
}

/** Every volume the template's drives use; `none` and the host's physical `cdrom` use none. */
export const templateVolumes = driveVolumes;

/**
 * Why a template living on another node cannot be cloned onto `zone`: the
 * first volume that is not on shared storage available there, or null when
 * every volume is. `storages` holds what the token can see of storage.cfg.
 */
export function cloneBlocker(
  config: VmConfig,
  storages: ReadonlyMap<string, StorageInfo>,
  zone: string,
): string | null {
  for (const v of templateVolumes(config)) {
    if (v.storage === null) return `volume ${v.key} (${v.volid}) is not on a Proxmox storage`;
    const s = storages.get(v.storage);
    if (s === undefined) {
      return `volume ${v.key} is on storage '${v.storage}', which the token cannot see ` +
        `(grant Datastore.Audit on /storage/${v.storage}) so it may not be shared`;
    }
    if (!s.shared) return `volume ${v.key} is on storage '${v.storage}', which is not shared`;
    if (s.nodes !== undefined && !s.nodes.includes(zone)) {
      return `volume ${v.key} is on storage '${v.storage}', which is not available on ${zone}`;
    }
  }
  return null;
}

/** storage.cfg as the token may see it (entries it has no Datastore privilege on are left out). */
export async function readStorages(
  api: ApiClient,
  signal: AbortSignal,
): Promise<Map<string, StorageInfo>> {
  const list = await api.get<unknown[]>("/storage", undefined, signal);
  const out = new Map<string, StorageInfo>();
  for (const e of Array.isArray(list) ? list : []) {
    const r = e as Record<string, unknown>;
    if (typeof r?.storage !== "string") continue;
    out.set(r.storage, {
      shared: Number(r.shared ?? 0) === 1,
      nodes: typeof r.nodes === "string" && r.nodes !== ""
        ? r.nodes.split(",").map((n) => n.trim())
        : undefined,
      type: typeof r.type === "string" ? r.type : undefined,
      content: typeof r.content === "string"
        ? r.content.split(",").map((c) => c.trim())
        : undefined,
    });
  }
  return out;
}

/**
 * Can `tmpl` be cloned onto `zone`? null when it can (same node, or every
 * volume on shared storage available there), else why not, as one line.
 * `storages` is read only when the answer depends on it.
 */
async function cloneProblem(
  tmpl: TemplateRef,
  zone: string,
  storages: () => Promise<ReadonlyMap<string, StorageInfo>>,
): Promise<string | null> {
  if (tmpl.node === zone) return null;
  if (tmpl.config === null) {
    return `template ${tmpl.vmid} on ${tmpl.node} cannot be read (grant VM.Audit on it) ` +
      `to tell whether it can be cloned to ${zone}`;
  }
  const blocker = cloneBlocker(tmpl.config, await storages(), zone);
  if (blocker === null) return null;
  return `template ${tmpl.vmid} on ${tmpl.node} cannot be cloned to ${zone}: ${blocker}; ` +
    `give ${zone} a template of its own (a per-zone template_vmid, --template-vmid ` +
    `${tmpl.node}=${tmpl.vmid},${zone}=<vmid>, or --template-name) or move the template's ` +
    `volumes to shared storage`;
}

/** The template of `source` for `zone`, with its guest agent checked. Throws TemplateProblem when there is none. */
export async function findTemplate(
  ctx: ProxmoxContext,
  source: TemplateSource,
  zone: string,
  signal: AbortSignal,
): Promise<TemplateRef> {
  let found: TemplateRef;
  switch (source.kind) {
    case "vmid":
      found = await locateVmid(ctx, source.vmid, null, signal);
      break;
    case "per-zone": {
      const vmid = source.vmids.get(zone);
      if (vmid === undefined) {
        throw new TemplateProblem(`no template is configured for zone ${zone}`, "unconfigured");
      }
      found = await locateVmid(ctx, vmid, zone, signal);
      break;
    }
    case "name":
      found = await templateNamed(ctx, source.name, zone, signal);
      break;
  }
  ctx.memory.templateFound(found.node);
  if (found.config !== null && !agentEnabled(found.config.agent)) {
    throw new TemplateProblem(
      `template VM ${found.vmid} does not enable the QEMU guest agent (config 'agent'); clones could never be bootstrapped`,
      "agent",
    );
  }
  return found;
}

/**
 * Where VMID `vmid` lives: the node the listing names (or `hint`) first,
 * then every configured node. Unreadable nodes make the answer unknown (the
 * error is thrown); only "missing everywhere" is a TemplateProblem.
 */
async function locateVmid(
  ctx: ProxmoxContext,
  vmid: number,
  hint: string | null,
  signal: AbortSignal,
): Promise<TemplateRef> {
  const { api, nodes } = ctx;
  let listed: string | null = null;
  try {
    listed = (await listResources(api, signal)).find((e) => e.vmid === vmid)?.node ?? null;
  } catch (err) {
    if (!isPermissionError(err)) throw err;
  }
  const first = [listed, hint].filter((n): n is string => n !== null);
  const order = [...new Set([...first, ...nodes])];
  let unknown: unknown = null;
  for (const node of order) {
    try {
      const config = await readConfig({ api, node, vmid }, signal);
      if (config !== null) return { vmid, node, config };
    } catch (err) {
      if (signal.aborted) throw err;
      // Listed there but not readable: it is there; its config stays unknown.
      if (node === listed && isPermissionError(err)) return { vmid, node, config: null };
      unknown ??= err;
    }
  }
  if (unknown !== null) throw unknown;
  throw new TemplateProblem(
    `template VM ${vmid} not found on any node (${nodes.join(", ")})`,
    "missing",
  );
}

/** The one template named `name` on node `zone` (its own config, no RRD lag). */
async function templateNamed(
  ctx: ProxmoxContext,
  name: string,
  zone: string,
  signal: AbortSignal,
): Promise<TemplateRef> {
  const list = await ctx.api.get<unknown[]>(`/nodes/${zone}/qemu`, undefined, signal);
  const hits = (Array.isArray(list) ? list : [])
    .map((e) => e as Record<string, unknown>)
    .filter((e) => e?.name === name && Number(e.template ?? 0) === 1)
    .map((e) => Number(e.vmid))
    .sort((a, b) => a - b);
  if (hits.length === 0) {
    throw new TemplateProblem(
      `no template named ${
        JSON.stringify(name)
      } on node ${zone} (or the token lacks VM.Audit on it)`,
      "missing",
    );
  }
  if (hits.length > 1) {
    throw new TemplateProblem(
      `several templates named ${JSON.stringify(name)} on node ${zone} (VMs ${hits.join(", ")})`,
      "ambiguous",
    );
  }
  const config = await readConfig(vmOf(ctx, { node: zone, vmid: hits[0] }), signal);
  if (config === null) {
    throw new TemplateProblem(`template VM ${hits[0]} vanished from ${zone}`, "missing");
  }
  return { vmid: hits[0], node: zone, config };
}

/** Why a clone of `type` from `tmpl` into `zone` cannot be made, as one line; null when it can. */
export type TypeProblem = (
  type: InstanceType,
  tmpl: TemplateRef,
  zone: string,
  storages: () => Promise<ReadonlyMap<string, StorageInfo>>,
) => Promise<string | null>;

/**
 * The startup check: every (instance type, zone) the slots use has a
 * template that can be cloned into that zone. The first definite problem
 * is thrown as one line naming the offering and zone; zones that cannot be
 * checked now (a node down, the API unreachable) are logged and left to
 * Create.
 */
export async function checkOfferingTemplates(
  ctx: ProxmoxContext,
  catalog: ReadonlyMap<string, InstanceType>,
  offerings: readonly { instanceType: string; zone: string }[],
  signal: AbortSignal,
  /** What else the type asks of its template there (a target storage, a linked clone, a disk size). */
  typeProblem: TypeProblem = () => Promise.resolve(null),
): Promise<void> {
  let storages: Promise<Map<string, StorageInfo>> | null = null;
  const cachedStorages = () => storages ??= readStorages(ctx.api, signal);
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const { instanceType, zone } of offerings) {
    const key = `${instanceType}\u0000${zone}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const type = catalog.get(instanceType);
    if (type === undefined) continue;
    try {
      const tmpl = await findTemplate(ctx, type.template, zone, signal);
      const problem = await cloneProblem(tmpl, zone, cachedStorages) ??
        await typeProblem(type, tmpl, zone, cachedStorages);
      if (problem !== null) problems.push(`offering ${instanceType} in zone ${zone}: ${problem}`);
    } catch (err) {
      if (err instanceof TemplateProblem) {
        problems.push(`offering ${instanceType} in zone ${zone}: ${err.message}`);
        continue;
      }
      if (signal.aborted) {
        log.warn("the template check ran out of time at {instanceType} in zone {zone}", {
          instanceType,
          zone,
        });
        break;
      }
      storages = null; // a failed read is not cached
      log.warn(
        "could not check the template of {instanceType} in zone {zone}: {error}; Create will try",
        { instanceType, zone, error: (err as Error).message },
      );
    }
  }
  if (problems.length === 0) return;
  const more = problems.length > 1 ? ` (and ${problems.length - 1} more offerings)` : "";
  throw new TemplateProblem(`${problems[0]}${more}`);
}
