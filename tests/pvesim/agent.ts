// QEMU guest agent behaviour (§4.13–§4.17): availability checks, file-write
// with PVE's `encode` semantics, exec and one-shot exec-status.

import { ApiError, fail } from "./errors.ts";
import { runInGuest } from "./guest.ts";
import { assertFileWritable, assertRpcAllowed, assertSpawnable } from "./guestcaps.ts";
import {
  agentEnabled,
  agentValid,
  type ClusterState,
  type ExecRecord,
  type VmRecord,
} from "./state.ts";
import type { SimFaults } from "./types.ts";

export interface AgentEnv {
  state: ClusterState;
  faults: SimFaults;
  bootstrapPath: string;
  bootstrapExec: string[];
  readyExec: readonly string[];
}

/** Whether the VM runs with its agent configured but the agent does not answer (yet). */
function agentSilent(env: AgentEnv, vm: VmRecord): boolean {
  if (vm.config.agent === undefined || vm.status !== "running") return false;
  // With `agent: 0` there is no QGA socket: the check fails at once.
  if (!agentEnabled(vm.config.agent)) return false;
  const booted = Date.now() - vm.startedAt >= env.state.timing.agentBootMs;
  return !booted || env.faults.agentDown;
}

/**
 * How long an agent call holds its pvedaemon worker: every agent command
 * first pings the agent (qemu-server QemuServer/Agent.pm agent_available →
 * qga_check_running, guest-ping with a 3 s timeout), so while the agent does
 * not answer each call waits that timeout out; otherwise `rounds` QGA round
 * trips (file-write: open, write, close, each with its ping) plus its size.
 */
export function agentWorkerMs(
  env: AgentEnv,
  node: string,
  vmid: number,
  rounds: number,
  bytes = 0,
): number {
  const vm = env.state.vms.get(vmid);
  if (!vm || vm.node !== node) return 0;
  const t = env.state.timing;
  if (agentSilent(env, vm)) return t.qgaPingTimeoutMs;
  if (vm.status !== "running" || !agentEnabled(vm.config.agent)) return 0;
  return rounds * t.qgaRoundTripMs + Math.ceil(bytes / 1024) * t.fileWriteMsPerKiB;
}

/** assert_agent_available + the guest-ping that follows it. */
export function assertAgent(env: AgentEnv, vm: VmRecord, qgaCommand: string): void {
  // A value PVE cannot parse is dropped when it reads the config: as if there were none.
  if (!agentValid(vm.config.agent)) throw fail("No QEMU guest agent configured");
  if (vm.status !== "running") throw fail(`VM ${vm.vmid} is not running`);
  if (!agentEnabled(vm.config.agent) || agentSilent(env, vm)) {
    throw fail("QEMU guest agent is not running");
  }
  if (env.faults.agentTimeouts > 0) {
    env.faults.agentTimeouts--;
    throw fail(`VM ${vm.vmid} qmp command '${qgaCommand}' failed - got timeout`);
  }
}

export function osInfo(): Record<string, unknown> {
  return {
    result: {
      id: "debian",
      name: "Debian GNU/Linux",
      "pretty-name": "Debian GNU/Linux 12 (bookworm)",
      version: "12 (bookworm)",
      "version-id": "12",
      machine: "x86_64",
      "kernel-release": "6.1.0-28-amd64",
      "kernel-version": "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)",
    },
  };
}

/**
 * Perl's encode_base64 over a character string: code points ≤ 0xFF become
 * single (Latin-1) bytes, anything wider dies. The guest gets those bytes.
 */
export function latin1Bytes(s: string): Uint8Array {
  const out: number[] = [];
  for (const ch of s) {
    const cp = ch.codePointAt(0)!;
    if (cp > 0xff) {
      throw fail("Wide character in subroutine entry at /usr/share/perl5/PVE/API2/Qemu/Agent.pm");
    }
    out.push(cp);
  }
  return Uint8Array.from(out);
}

/** JSON output of guest bytes: each byte becomes one code point (Latin-1), as PVE's Perl does. */
export function bytesAsLatin1(b: Uint8Array): string {
  let s = "";
  for (let i = 0; i < b.length; i += 8192) {
    s += String.fromCharCode(...b.subarray(i, i + 8192));
  }
  return s;
}

function decodeB64Strict(s: string): Uint8Array | null {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(s) || s.length % 4 !== 0) return null;
  try {
    return Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
  } catch {
    return null;
  }
}

export function fileWrite(
  env: AgentEnv,
  vm: VmRecord,
  file: string,
  content: string,
  encode: boolean,
): void {
  assertAgent(env, vm, "guest-file-open");
  assertRpcAllowed(vm, "guest-file-open");
  // encode=1: PVE base64s the text itself, so the guest gets the text (Latin-1).
  // encode=0: the content is base64 already and goes to QGA as is.
  let bytes: Uint8Array;
  if (encode) bytes = latin1Bytes(content);
  else {
    const d = decodeB64Strict(content);
    if (!d) throw fail("Agent error: Guest agent command failed, error was 'Invalid base64 data'");
    bytes = d;
  }
  const dir = file.slice(0, file.lastIndexOf("/")) || "/";
  if (!file.startsWith("/") || !vm.dirs.has(dir)) {
    throw fail(
      `Agent error: failed to open file '${file}' (mode: 'wb'): No such file or directory`,
    );
  }
  assertFileWritable(vm, file);
  vm.files.set(file, bytes);
  vm.fileWrites.push({ file, content, encode, bytes: bytes.slice(), at: Date.now() });
}

export function exec(env: AgentEnv, vm: VmRecord, command: string[], inputData: string): number {
  assertAgent(env, vm, "guest-exec");
  assertRpcAllowed(vm, "guest-exec");
  if (command.length === 0 || command[0] === "") {
    throw fail("Agent error: Guest agent command failed, error was 'Invalid parameter 'path''");
  }
  assertSpawnable(vm, command);
  const stdin = latin1Bytes(inputData);
  const outcome = runInGuest(
    {
      vm,
      faults: env.faults,
      bootstrapPath: env.bootstrapPath,
      bootstrapExec: env.bootstrapExec,
      readyExec: env.readyExec,
    },
    command,
    stdin,
  );
  const pid = vm.nextExecPid++;
  const now = Date.now();
  const rec: ExecRecord = {
    pid,
    command: [...command],
    inputData,
    startedAt: now,
    doneAt: now + env.state.timing.execMs + outcome.extraMs,
    exitcode: outcome.exitcode,
    signal: outcome.signal,
    stdout: new TextDecoder().decode(outcome.stdout),
    stderr: new TextDecoder().decode(outcome.stderr),
    stdoutBytes: outcome.stdout,
    stderrBytes: outcome.stderr,
    kind: outcome.kind,
    reported: false,
  };
  vm.execs.set(pid, rec);
  return pid;
}

export function execStatus(env: AgentEnv, vm: VmRecord, pid: number): Record<string, unknown> {
  assertAgent(env, vm, "guest-exec-status");
  assertRpcAllowed(vm, "guest-exec-status");
  const rec = vm.execs.get(pid);
  // qemu-ga forgets a pid once it has reported it exited.
  if (!rec || rec.reported) {
    throw new ApiError(
      500,
      "Agent error: Guest agent command failed, error was 'Invalid parameter 'pid''",
    );
  }
  if (Date.now() < rec.doneAt) return { exited: 0 };
  rec.reported = true;
  const out: Record<string, unknown> = { exited: 1 };
  if (rec.signal !== undefined) out.signal = rec.signal;
  else out.exitcode = rec.exitcode ?? 0;
  if (rec.stdoutBytes.length > 0) out["out-data"] = bytesAsLatin1(rec.stdoutBytes);
  if (rec.stderrBytes.length > 0) out["err-data"] = bytesAsLatin1(rec.stderrBytes);
  return out;
}
