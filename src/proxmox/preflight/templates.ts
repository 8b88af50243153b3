// The template check of preflight, with the backend's own lookup: each
// offering's template exists, is a template with the guest agent, passes no
// host device through, can be cloned to its zone, and suits what the type
// asks (its storage, a linked clone, its disk size: ../cluster/clone_target.ts).

import type { Config, InstanceType } from "../../config/types.ts";
import {
  cloneBlocker,
  findTemplate,
  TemplateProblem,
  type TemplateRef,
} from "../cluster/templates.ts";
import { isPermissionError, type VmConfig } from "../vm/vm.ts";
import { rootOnlyDevices } from "./needs.ts";
import { cloneTargetFinding } from "../cluster/clone_target.ts";
import { storageFor } from "../../config/instance_options.ts";
import { type CheckResult, errText, failed, pass, skipped, warn } from "./result.ts";
import { guard, type PreflightRun } from "./run.ts";

/** One (instance type, zone) the offerings use, and how many slots it has. */
export interface Pair {
  type: InstanceType;
  zone: string;
  count: number;
}

/** A pair whose template was found, for the storage and privilege checks. */
export interface Found extends Pair {
  tmpl: TemplateRef & { config: VmConfig };
  /** Its template can be cloned into the zone (its disks count against a storage). */
  clonable: boolean;
}

/** The (instance type, zone) pairs the offerings use, with their slot counts. */
export function pairs(cfg: Config): Pair[] {
  const pairs = new Map<string, Pair>();
  for (const o of cfg.offerings) {
    const key = `${o.instanceType}\u0000${o.zone}`;
    const had = pairs.get(key);
    if (had) {
      had.count += o.count;
      continue;
    }
    const type = cfg.catalog.get(o.instanceType);
    if (type !== undefined) pairs.set(key, { type, zone: o.zone, count: o.count });
  }
  return [...pairs.values()];
}

/** Each offering's template: exists, is a template, has the agent, can be cloned to its zone. */
export async function templateChecks(
  run: PreflightRun,
  usable: ReadonlySet<string>,
  found: Found[],
): Promise<CheckResult[]> {
  const out: CheckResult[] = [];
  for (const pair of pairs(run.cfg)) {
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
      ...await guard(run, "template", subject, () => oneTemplate(run, pair, subject, found)),
    );
  }
  return out;
}

async function oneTemplate(
  run: PreflightRun,
  pair: Pair,
  subject: string,
  found: Found[],
): Promise<CheckResult[]> {
  let tmpl: TemplateRef;
  try {
    tmpl = await findTemplate(run.ctx, pair.type.template, pair.zone, run.signal);
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
    const blocker = cloneBlocker(config, await run.storages(), pair.zone);
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
  // What the type asks beyond a plain full clone: a target storage, a linked clone, a disk size.
  const target = await cloneTargetFinding(pair.type, tmpl, pair.zone, () => run.storages());
  if (target !== null) {
    record.clonable = false;
    return [failed("template", subject, `${where}: ${target.problem}`, target.fix)];
  }
  const what = `${where}: a template with the guest agent enabled; ${reach}${typeNotes(pair)}`;
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

/** What a pair's type adds to its clones, for the PASS line (`; linked clones; disk 40 GiB`). */
function typeNotes({ type, zone }: Pair): string {
  const notes: string[] = [];
  if (type.clone === "linked") notes.push("linked clones");
  const storage = storageFor(type, zone);
  if (storage !== null && type.clone !== "linked") notes.push(`disks onto ${storage}`);
  if (type.diskGib !== undefined) notes.push(`boot disk grown to ${type.diskGib} GiB`);
  if (type.network !== undefined) {
    const { bridge, tag, mtu } = type.network;
    const more = [tag !== undefined ? `tag ${tag}` : "", mtu !== undefined ? `mtu ${mtu}` : ""]
      .filter((x) => x !== "");
    notes.push(`net0 on ${bridge}${more.length > 0 ? ` (${more.join(", ")})` : ""}`);
  }
  return notes.map((n) => `; ${n}`).join("");
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
