// The guest check of preflight: whether the guest agent of each template's
// clones allows what Configure uses (guest-file-open, -write, -close,
// guest-exec, guest-exec-status: ../vm/guest_caps.ts). A template never
// runs and preflight never starts anything, so it asks a running VM the
// provider made from that template (found by its marker: the machine id
// names the instance type and zone, and so the template), with the read-only
// `GET …/agent/info`. With none running it says so and points at `smoke`,
// which boots one. A missing /bin/sh shows only when a command runs: smoke
// and Configure tell it.

import { parseMarker } from "../naming.ts";
import {
  ALLOW_COMMANDS_FIX,
  BOOTSTRAP_COMMANDS,
  readCommands,
  refusesText,
} from "../vm/guest_caps.ts";
import { listResources, readConfig, type VmAt, vmOf } from "../vm/vm.ts";
import { type CheckResult, errText, failed, pass, skipped, warn } from "./result.ts";
import type { PreflightRun } from "./run.ts";
import type { Found } from "./templates.ts";

const CHECK = "guest";

/** At most this many VM configs are read looking for a running clone of each template. */
const MAX_READS = 64;

/** One line per template: its running clones' agent allows Configure's commands, or what it refuses. */
export async function guestChecks(
  run: PreflightRun,
  found: readonly Found[],
): Promise<CheckResult[]> {
  const templates = new Map<string, Found[]>();
  for (const f of found) {
    const key = `${f.tmpl.vmid}@${f.tmpl.node}`;
    templates.set(key, [...templates.get(key) ?? [], f]);
  }
  if (templates.size === 0) return [];
  const clones = await runningClones(run, found);
  const out: CheckResult[] = [];
  for (const [key, pairs] of templates) {
    const { vmid } = pairs[0].tmpl;
    const subject = `template ${vmid}`;
    const vm = clones.get(key);
    if (vm === undefined) {
      out.push(skipped(
        CHECK,
        subject,
        `not checked: no running VM cloned from template ${vmid} to ask (preflight never ` +
          "starts one, and a template does not run)",
        "run `bigfleet-proxmox smoke` with the same flags: it boots one and Configure names " +
          `any command the guest agent refuses (or check a clone: qm guest cmd <vmid> info)`,
      ));
      continue;
    }
    out.push(await askAgent(run, subject, vmid, vm));
  }
  return out;
}

async function askAgent(
  run: PreflightRun,
  subject: string,
  template: number,
  vm: VmAt & { machineId: string },
): Promise<CheckResult> {
  const who = `VM ${vm.vmid} on ${vm.node} (${vm.machineId}, cloned from template ${template})`;
  let seen;
  try {
    seen = await readCommands(vmOf(run.ctx, vm), BOOTSTRAP_COMMANDS, run.signal);
  } catch (err) {
    if (run.signal.aborted) throw err;
    return warn(
      CHECK,
      subject,
      `could not ask the guest agent of ${who}: ${errText(err)}`,
      "check it by hand: qm guest cmd <vmid> info",
    );
  }
  if (seen === null) {
    return warn(
      CHECK,
      subject,
      `the guest agent of ${who} does not list its commands (guest-info)`,
      "check that guest-info is allowed in the guest's qemu-guest-agent",
    );
  }
  if (seen.disabled.length + seen.missing.length > 0) {
    const fix = seen.disabled.length > 0
      ? ALLOW_COMMANDS_FIX
      : "install a newer qemu-guest-agent in the template";
    return failed(CHECK, subject, `${refusesText(vm.vmid, seen)}: asked ${who}`, fix);
  }
  return pass(
    CHECK,
    subject,
    `the guest agent of ${who} allows ${BOOTSTRAP_COMMANDS.join(", ")}`,
  );
}

/**
 * One running VM of the provider's per template (`vmid@node`) of `found`,
 * by the marker of the VMs the cluster lists as running: its machine id
 * `<provider>/<capacity>/<type>/<zone>/<n>` names the pair, whose template it
 * was cloned from.
 */
async function runningClones(
  run: PreflightRun,
  found: readonly Found[],
): Promise<Map<string, VmAt & { machineId: string }>> {
  const byPair = new Map(found.map((f) => [`${f.type.name}/${f.zone}`, f]));
  const wanted = new Set(found.map((f) => `${f.tmpl.vmid}@${f.tmpl.node}`));
  const out = new Map<string, VmAt & { machineId: string }>();
  const listed = (await listResources(run.api, run.signal))
    .filter((e) =>
      e.status === "running" && e.template !== 1 && (e.name ?? "").startsWith("bigfleet-")
    )
    .sort((a, b) => a.vmid - b.vmid)
    .slice(0, MAX_READS);
  for (const e of listed) {
    if (out.size === wanted.size) break;
    const config = await readConfig(vmOf(run.ctx, e), run.signal).catch(() => null);
    const machineId = parseMarker(config?.description)?.machineId;
    const parts = machineId?.split("/") ?? [];
    if (machineId === undefined || parts[0] !== run.cfg.provider || parts.length < 5) continue;
    const f = byPair.get(`${parts[2]}/${parts[3]}`);
    if (f === undefined) continue;
    const key = `${f.tmpl.vmid}@${f.tmpl.node}`;
    if (!out.has(key)) out.set(key, { node: e.node, vmid: e.vmid, machineId });
  }
  return out;
}
