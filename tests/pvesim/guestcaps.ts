// Guests that cannot run the bootstrap (SimTemplate.guest, inherited by
// clones): qemu-ga with commands disabled by its allow/block list (RHEL and
// Rocky 10 ship guest-exec and guest-file-* disabled), and guests without a
// shell. qemu-ga answers a disabled command with the QMP error
// `The command <name> has been disabled for this instance` (qapi
// qmp-dispatch.c); qemu-server's agent_cmd turns an error reply into
// `Agent error: <desc>` (QemuServer/Agent.pm check_agent_error, a 500) for
// exec, exec-status and file-write, while the plain commands (ping,
// get-osinfo, info) hand the reply back as `{"result": {"error": …}}` with a
// 200 (API2/Qemu/Agent.pm register_command). guest-exec spawns with glib,
// which fails `Failed to execute child process “<path>” (No such file or
// directory)`; qemu-ga before 9.1 wraps that as `Guest agent command failed,
// error was '<message>'`. `GET …/agent/info` (guest-info) lists every
// command with `enabled`, so a client can tell beforehand.

import { fail } from "./errors.ts";
import type { VmRecord } from "./state.ts";
import type { SimGuest } from "./captypes.ts";

/** What RHEL and Rocky 10's qemu-guest-agent leaves disabled. */
export const RHEL10_GUEST: SimGuest = {
  blockedRpcs: [
    "guest-exec",
    "guest-exec-status",
    "guest-file-open",
    "guest-file-close",
    "guest-file-read",
    "guest-file-write",
    "guest-file-seek",
    "guest-file-flush",
  ],
  qgaVersion: "9.1.0",
};

/** The commands a Linux qemu-ga registers (guest-info's supported_commands). */
const QGA_COMMANDS = [
  "guest-exec",
  "guest-exec-status",
  "guest-file-close",
  "guest-file-flush",
  "guest-file-open",
  "guest-file-read",
  "guest-file-seek",
  "guest-file-write",
  "guest-fsfreeze-freeze",
  "guest-fsfreeze-freeze-list",
  "guest-fsfreeze-status",
  "guest-fsfreeze-thaw",
  "guest-fstrim",
  "guest-get-cpustats",
  "guest-get-devices",
  "guest-get-disks",
  "guest-get-diskstats",
  "guest-get-fsinfo",
  "guest-get-host-name",
  "guest-get-memory-block-info",
  "guest-get-memory-blocks",
  "guest-get-osinfo",
  "guest-get-time",
  "guest-get-timezone",
  "guest-get-users",
  "guest-get-vcpus",
  "guest-info",
  "guest-network-get-interfaces",
  "guest-ping",
  "guest-set-memory-blocks",
  "guest-set-time",
  "guest-set-user-password",
  "guest-set-vcpus",
  "guest-shutdown",
  "guest-ssh-add-authorized-keys",
  "guest-ssh-get-authorized-keys",
  "guest-ssh-remove-authorized-keys",
  "guest-suspend-disk",
  "guest-suspend-hybrid",
  "guest-suspend-ram",
  "guest-sync",
  "guest-sync-delimited",
];

/** Commands qemu-ga answers without a success response (the guest goes away). */
const NO_RESPONSE = new Set([
  "guest-shutdown",
  "guest-suspend-disk",
  "guest-suspend-hybrid",
  "guest-suspend-ram",
]);

const SHELLS = /^(?:\/usr)?(?:\/bin\/)?(?:sh|bash|dash|ash)$/;

function blocked(vm: VmRecord, rpc: string): boolean {
  return vm.guest?.blockedRpcs?.includes(rpc) ?? false;
}

function disabledText(rpc: string): string {
  return `The command ${rpc} has been disabled for this instance`;
}

/** agent_cmd's answer for a command the guest disabled: 500 `Agent error: …`. */
export function assertRpcAllowed(vm: VmRecord, rpc: string): void {
  if (blocked(vm, rpc)) throw fail(`Agent error: ${disabledText(rpc)}`);
}

/** file-write past its guest-file-open: the open (mode `wb`) truncated the file before a disabled write fails. */
export function assertFileWritable(vm: VmRecord, file: string): void {
  if (!blocked(vm, "guest-file-write")) return;
  vm.files.set(file, new Uint8Array());
  assertRpcAllowed(vm, "guest-file-write");
}

/** A plain agent command's 200 answer when the guest disabled it, else undefined. */
export function disabledResult(vm: VmRecord, rpc: string): Record<string, unknown> | undefined {
  if (!blocked(vm, rpc)) return undefined;
  return { result: { error: { class: "CommandNotFound", desc: disabledText(rpc) } } };
}

function qgaBefore91(vm: VmRecord): boolean {
  const [major, minor] = (vm.guest?.qgaVersion ?? "7.2.0").split(".").map(Number);
  return major < 9 || (major === 9 && minor < 1);
}

/** guest-exec's spawn of a program the guest lacks (only shells are modelled missing). */
export function assertSpawnable(vm: VmRecord, argv: string[]): void {
  if (!vm.guest?.noShell || !SHELLS.test(argv[0] ?? "")) return;
  const glib = `Failed to execute child process “${argv[0]}” (No such file or directory)`;
  const desc = qgaBefore91(vm) ? `Guest agent command failed, error was '${glib}'` : glib;
  throw fail(`Agent error: ${desc}`);
}

/** guest-info as `GET …/agent/info` answers it. */
export function guestInfo(vm: VmRecord): Record<string, unknown> {
  return {
    result: {
      version: vm.guest?.qgaVersion ?? "7.2.0",
      supported_commands: QGA_COMMANDS.map((name) => ({
        enabled: !blocked(vm, name),
        name,
        "success-response": !NO_RESPONSE.has(name),
      })),
    },
  };
}
