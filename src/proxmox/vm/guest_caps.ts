// What a guest's agent lets the provider do there (docs/proxmox-notes.md
// "Guests that cannot run the bootstrap"): qemu-ga may disable commands by
// its allow or block list (RHEL and Rocky 10 disable guest-exec and the
// guest-file-* commands), which `GET …/agent/info` shows beforehand, and a
// guest may lack the program an exec names (no /bin/sh), which only the exec
// shows. Each is worded as what is refused and the fix in the guest.

import { getLogger } from "@logtape/logtape";
import { BackendError } from "../../kit/backend.ts";
import { serverTextOf } from "../api/errors.ts";
import { vmPath, type VmRef } from "./vm.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/** The agent commands Configure uses: file-write's three, then exec and its status. */
export const BOOTSTRAP_COMMANDS = [
  "guest-file-open",
  "guest-file-write",
  "guest-file-close",
  "guest-exec",
  "guest-exec-status",
] as const;

/** The fix for commands qemu-ga has disabled. */
export const ALLOW_COMMANDS_FIX = "allow them in the guest's qemu-guest-agent and rebuild the " +
  "template: on RHEL, Rocky or Alma in /etc/sysconfig/qemu-ga (take them out of the block list, " +
  "or add them to the --allow-rpcs list), elsewhere allow-rpcs / block-rpcs in " +
  "/etc/qemu/qemu-ga.conf; then systemctl restart qemu-guest-agent (docs/templates.md#2-guest-agent)";

/** The fix for a program the guest does not have. */
export const MISSING_PROGRAM_FIX = "install it in the template (a shell such as dash or busybox " +
  "for /bin/sh), or set --bootstrap-exec to a program the guest has " +
  "(docs/templates.md#4-the-bootstrap-hook)";

/** What guest-info says of the commands asked about: those it lists disabled, and those it lacks. */
export interface CommandsSeen {
  disabled: string[];
  missing: string[];
}

/**
 * `GET …/agent/info` (qemu-ga's guest-info: every command with `enabled`)
 * for `wanted`; null when the agent does not tell (guest-info itself
 * disabled, or an answer without the list).
 */
export async function readCommands(
  vm: VmRef,
  wanted: readonly string[],
  signal: AbortSignal,
): Promise<CommandsSeen | null> {
  const info = await vm.api.get<Record<string, unknown>>(
    `${vmPath(vm)}/agent/info`,
    undefined,
    signal,
  );
  const result = info?.result as Record<string, unknown> | undefined;
  const list = result?.supported_commands;
  if (!Array.isArray(list)) return null;
  const enabled = new Map<string, boolean>();
  for (const c of list) {
    const r = c as Record<string, unknown>;
    if (typeof r?.name === "string") enabled.set(r.name, r.enabled !== false && r.enabled !== 0);
  }
  return {
    disabled: wanted.filter((n) => enabled.get(n) === false),
    missing: wanted.filter((n) => !enabled.has(n)),
  };
}

/** `the guest agent of VM 101 refuses guest-exec (disabled in its configuration)`. */
export function refusesText(vmid: number, seen: CommandsSeen): string {
  const parts: string[] = [];
  if (seen.disabled.length > 0) {
    parts.push(`refuses ${seen.disabled.join(", ")} (disabled in its configuration)`);
  }
  if (seen.missing.length > 0) {
    parts.push(`does not offer ${seen.missing.join(", ")} (too old a qemu-guest-agent)`);
  }
  return `the guest agent of VM ${vmid} ${parts.join(" and ")}`;
}

/**
 * Before anything is written into the guest: the agent must offer every
 * command Configure uses, so a guest that refuses one fails here, before
 * the secret is delivered. An agent that does not tell is let through: the
 * commands themselves then say it (explainAgentError).
 */
export async function assertBootstrapAllowed(vm: VmRef, signal: AbortSignal): Promise<void> {
  const seen = await readCommands(vm, BOOTSTRAP_COMMANDS, signal).catch((err) => {
    if (signal.aborted) throw err;
    log.debug("could not read the guest agent's commands of VM {vmid}: {error}", {
      vmid: vm.vmid,
      node: vm.node,
      error: (err as Error).message,
    });
    return null;
  });
  if (seen === null || seen.disabled.length + seen.missing.length === 0) return;
  const fix = seen.disabled.length > 0
    ? ALLOW_COMMANDS_FIX
    : "install a newer qemu-guest-agent in the template";
  throw new BackendError(`${refusesText(vm.vmid, seen)}; ${fix}`);
}

/** qemu-ga's refusal of a command its configuration disables (QEMU qapi/qmp-dispatch.c). */
const DISABLED_RE = /The command (guest-[\w-]+) has been disabled for this instance/;

/** glib's spawn failure of a program the guest lacks (qemu-ga before 9.1 wraps it). */
const SPAWN_RE = /Failed to execute child process [“"']([^”"']+)[”"'] \(([^)]*)\)/;

/**
 * An agent call's error that names a command the guest disabled or a
 * program it cannot start, worded with the fix; null for any other error.
 */
export function explainAgentError(vmid: number, err: unknown): BackendError | null {
  const text = serverTextOf(err);
  const disabled = DISABLED_RE.exec(text);
  if (disabled !== null) {
    return new BackendError(
      `${refusesText(vmid, { disabled: [disabled[1]], missing: [] })}; ${ALLOW_COMMANDS_FIX}`,
    );
  }
  const spawn = SPAWN_RE.exec(text);
  if (spawn !== null) {
    return new BackendError(
      `the guest of VM ${vmid} cannot run ${spawn[1]} (${spawn[2]}, says its guest agent); ` +
        MISSING_PROGRAM_FIX,
    );
  }
  return null;
}

/** The fix in the guest for an error explainAgentError or assertBootstrapAllowed worded; else null. */
export function guestFix(message: string): string | null {
  if (/the guest agent of VM \d+ (refuses|does not offer) /.test(message)) {
    return /refuses /.test(message) ? ALLOW_COMMANDS_FIX : "install a newer qemu-guest-agent in " +
      "the template";
  }
  return /the guest of VM \d+ cannot run /.test(message) ? MISSING_PROGRAM_FIX : null;
}
