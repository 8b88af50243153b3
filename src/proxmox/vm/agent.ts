// QEMU guest agent calls: readiness, file-write and exec (the PVE behaviour
// they rely on: docs/proxmox-notes.md "Guest agent").
//
// File-write design: PVE's file-write truncates (no append) and takes at most
// 61440 characters of content, which with client-side base64 (`encode=0`, the
// only byte-exact mode) is 46080 raw bytes; the whole JSON body must also stay
// under the old 64 KiB POST limit. A blob that fits one call is written
// straight to its path. A larger one is written as numbered part files
// `<path>.partN` (each a fresh truncate-and-write, so a retried call is
// harmless), then one exec of /bin/sh concatenates them in order into a temp
// file and renames it over `<path>` (so the hook never sees a half-assembled
// file), then removes the parts. Each file-write returns only after QGA's
// file-close, so concatenating the confirmed parts in order is byte-exact.

import { getLogger } from "@logtape/logtape";
import { BackendError } from "../../kit/backend.ts";
import { isTransient, ProxmoxApiError, serverTextOf } from "../api/errors.ts";
import { type Backoff, pollUntil, pollWithin } from "../../async/poll.ts";
import { sleep } from "../../async/sleep.ts";
import { readStatus, vmPath, type VmRef } from "./vm.ts";

export interface ExecResult {
  /** null when the process was killed by a signal (no exit code). */
  exitCode: number | null;
  signal: number | null;
  stdout: string;
  stderr: string;
}

export interface AgentWaitTiming {
  /** Between pings: each one that meets a booting guest holds a pvedaemon worker for 3 s. */
  pollMs: number;
  timeoutMs: number;
  /** How long to wait before the first ping (the VM was only just started); default none. */
  firstMs?: number;
}

/** pve-http-server before 5.2.2 refuses bodies over 64 KiB. */
const MAX_BODY = 64 * 1024;
/** file-write `content` maxLength. */
const MAX_CONTENT = 61440;

const AGENT_RETRY_RE = /QEMU guest agent is not running|got timeout|guest-ping/i;

/** qemu-server's agent check on a VM whose QEMU process is gone. */
const NOT_RUNNING_RE = /^VM \d+ is not running/;

/**
 * Whether a config `agent` value ("1", 1, "enabled=on,fstrim…", "0")
 * enables the agent. `enabled=` is a PVE boolean, which pve-common's
 * parse_boolean reads as 1, on, yes or true in any case; the bare default-key
 * form takes only 1 or 0 (PVE refuses `agent: on`, and drops such a value
 * from a hand-edited config: docs/proxmox-notes.md "Guest agent").
 */
export function agentEnabled(value: unknown): boolean {
  if (value === undefined || value === null) return false;
  const s = String(value).trim();
  for (const part of s.split(",")) {
    if (!part.includes("=")) return part.trim() === "1";
    const [k, v] = part.split("=", 2);
    if (k.trim() === "enabled") return /^(1|on|yes|true)$/i.test(v.trim());
  }
  return false;
}

/**
 * Poll `agent/ping` until it answers. Retries while the guest boots (`QEMU guest
 * agent is not running`, `got timeout`, proxy 59x); fails at once when the VM
 * is no longer running (it crashed or was stopped: no agent will come) and on
 * anything else, e.g. `No QEMU guest agent configured` or a permission error.
 */
export async function waitForAgent(
  vm: VmRef,
  timing: AgentWaitTiming,
  signal: AbortSignal,
): Promise<number> {
  const { api, node, vmid } = vm;
  let last = "";
  const gone = () =>
    new BackendError(
      `VM ${vmid} on ${node} is not running: it stopped (crashed, or was stopped outside ` +
        `the provider) while waiting for its guest agent`,
    );
  if (timing.firstMs) await sleep(timing.firstMs, signal);
  const polls = await pollWithin(signal, timing.pollMs, timing.timeoutMs, async (call) => {
    try {
      await api.post(`${vmPath(vm)}/agent/ping`, undefined, signal);
      return call + 1;
    } catch (err) {
      if (signal.aborted) throw signal.reason;
      const text = serverTextOf(err);
      if (NOT_RUNNING_RE.test(text)) throw gone();
      // A legacy server over fetch gives a bare 500: with `agent` verified enabled
      // in the config beforehand, the guest is booting, or no longer running.
      const legacyBare500 = err instanceof ProxmoxApiError && err.status === 500 && text === "";
      if (legacyBare500 && (await readStatus(vm, signal))?.status !== "running") {
        throw gone();
      }
      if (!(AGENT_RETRY_RE.test(text) || isTransient(err) || legacyBare500)) throw err;
      last = (err as Error).message;
      return undefined;
    }
  });
  if (polls === undefined) {
    throw new BackendError(
      `guest agent of VM ${vmid} did not answer within ${
        timing.timeoutMs / 1000
      }s (last error: ${last})`,
    );
  }
  return polls;
}

/** Base64 of bytes without a call-stack-sized intermediate. */
export function toBase64(bytes: Uint8Array): string {
  let bin = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  }
  return btoa(bin);
}

/** Raw bytes per file-write call for this guest path: a multiple of 3, so parts are independent base64. */
export function chunkSizeFor(file: string): number {
  const overhead = JSON.stringify({ file, content: "", encode: 0 }).length + 64;
  const contentChars = Math.min(MAX_CONTENT, MAX_BODY - overhead);
  const size = Math.floor(contentChars / 4) * 3;
  if (size < 3) throw new BackendError("bootstrap path is too long for agent file-write");
  return size;
}

const log = getLogger(["bigfleet", "proxmox"]);

/** Calls per file-write on transient failures, and the waits between them. */
const WRITE_ATTEMPTS = 3;
const WRITE_RETRY: Backoff = { initialMs: 250, maxMs: 1000, factor: 2 };

async function writeOne(
  vm: VmRef,
  file: string,
  bytes: Uint8Array,
  signal: AbortSignal,
): Promise<void> {
  const { api } = vm;
  const body = { file, content: toBase64(bytes), encode: 0 };
  await pollUntil(signal, WRITE_RETRY, async (call) => {
    try {
      await api.post(`${vmPath(vm)}/agent/file-write`, body, signal);
      return true;
    } catch (err) {
      // file-write truncates and rewrites the whole file: repeating it is safe,
      // after a lost answer as after QGA's `got timeout` on one of its steps.
      const again = isTransient(err) || /got timeout/i.test(serverTextOf(err));
      if (!again || call + 1 >= WRITE_ATTEMPTS || signal.aborted) throw err;
      return undefined;
    }
  });
}

/** POSIX single-quoting: the paths are data, never shell syntax. */
function shQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/**
 * One shell line that concatenates the parts in order into a temp file and
 * renames it over the target only if every step succeeded. Plain `&&` chains
 * only: it must run on any /bin/sh (dash, busybox ash).
 */
function assembleScript(file: string, parts: string[]): string {
  const tmp = shQuote(`${file}.assemble`);
  const ps = parts.map(shQuote).join(" ");
  return `umask 077; cat -- ${ps} > ${tmp} && mv -f -- ${tmp} ${shQuote(file)} && rm -f -- ${ps}`;
}

/** Write `data` to `file` in the guest, byte-exact, whatever its size. */
export async function writeGuestFile(
  vm: VmRef,
  file: string,
  data: Uint8Array,
  execTiming: Backoff,
  signal: AbortSignal,
): Promise<{ parts: number }> {
  const partName = (i: number) => `${file}.part${i}`;
  const size = chunkSizeFor(partName(999999));
  if (data.length <= size) {
    await writeOne(vm, file, data, signal);
    return { parts: 1 };
  }
  const parts: string[] = [];
  for (let off = 0, i = 0; off < data.length; off += size, i++) {
    parts.push(partName(i));
    await writeOne(vm, partName(i), data.subarray(off, off + size), signal);
  }
  const res = await runCommand(
    vm,
    ["/bin/sh", "-c", assembleScript(file, parts)],
    execTiming,
    signal,
  ).catch(async (err) => {
    // Refused outright, so nothing ran (a guest without a shell): no rm can run either, so the
    // parts, which hold the secret, are overwritten in place instead. A lost answer may have
    // run the assembly, which must not be raced.
    if (!signal.aborted && !isTransient(err)) await wipeGuestFiles(vm, parts, signal);
    throw err;
  });
  if (res.exitCode !== 0) {
    // Best effort: the parts hold the secret blob; do not leave them behind. The assembly's
    // failure is what the caller gets; a cleanup that fails too is said here (paths only).
    const cleanup = `rm -f -- ${[`${file}.assemble`, ...parts].map(shQuote).join(" ")}`;
    await runCommand(vm, ["/bin/sh", "-c", cleanup], execTiming, signal).then((r) => {
      if (r.exitCode !== 0) throw commandFailed("removing them", r);
    }).catch((err) => {
      log.warn(
        "the parts of {file} may remain in VM {vmid}: {error}; remove {file}.part* in the guest",
        { file, vmid: vm.vmid, node: vm.node, error: (err as Error).message },
      );
    });
    throw commandFailed(`assembling ${file} from ${parts.length} parts in the guest`, res);
  }
  return { parts: parts.length };
}

/**
 * Overwrite files in the guest with one newline each (file-write truncates),
 * where no command can remove them: what they held (a secret) is gone. Best
 * effort: a failure is logged with the paths only.
 */
export async function wipeGuestFiles(
  vm: VmRef,
  files: readonly string[],
  signal: AbortSignal,
): Promise<void> {
  for (const file of files) {
    await writeOne(vm, file, new Uint8Array([10]), signal).catch((err) => {
      log.warn("could not overwrite {file} in VM {vmid}: {error}; remove it in the guest", {
        file,
        vmid: vm.vmid,
        node: vm.node,
        error: (err as Error).message,
      });
    });
  }
}

/**
 * exec-status output is base64-decoded bytes that PVE may hand back as Latin-1
 * code units (docs/proxmox-notes.md "Guest agent"). When every unit is ≤ 0xFF
 * and the bytes form valid UTF-8, decode them as UTF-8; otherwise keep the string as it came.
 */
export function decodeGuestOutput(s: unknown): string {
  if (typeof s !== "string") return "";
  let high = false;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c > 0xff) return s;
    if (c >= 0x80) high = true;
  }
  if (!high) return s;
  const bytes = Uint8Array.from(s, (ch) => ch.charCodeAt(0));
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return s;
  }
}

/** The last `max` characters (whole lines where possible), trimmed. */
export function tail(s: string, max = 1024): string {
  const t = s.trimEnd();
  if (t.length <= max) return t;
  const cut = t.slice(t.length - max);
  const nl = cut.indexOf("\n");
  return "…" + (nl >= 0 && nl < cut.length - 1 ? cut.slice(nl + 1) : cut);
}

export function describeExit(r: ExecResult): string {
  if (r.exitCode !== null) return `exit code ${r.exitCode}`;
  if (r.signal !== null) return `killed by signal ${r.signal}`;
  return "no exit code reported";
}

/** A guest command that did not exit 0, as one error: `<what> failed (<exit>): <stderr tail>`. */
export function commandFailed(what: string, res: ExecResult): BackendError {
  const stderr = tail(res.stderr);
  return new BackendError(`${what} failed (${describeExit(res)})${stderr ? `: ${stderr}` : ""}`);
}

/**
 * Start `argv` in the guest and wait for it to exit. exec is not idempotent,
 * so a failed POST is not retried. exec-status is polled with a growing
 * interval and never again after it reported `exited` (qemu-ga forgets the pid).
 */
export async function runCommand(
  vm: VmRef,
  argv: string[],
  timing: Backoff,
  signal: AbortSignal,
): Promise<ExecResult> {
  const { api, vmid } = vm;
  const started = await api.post<{ pid?: unknown }>(
    `${vmPath(vm)}/agent/exec`,
    { command: argv },
    signal,
  );
  const pid = Number(started?.pid);
  if (!Number.isInteger(pid)) throw new BackendError(`agent exec in VM ${vmid} returned no pid`);
  return await pollUntil(signal, timing, async () => {
    const st = await api.get<Record<string, unknown>>(
      `${vmPath(vm)}/agent/exec-status`,
      { pid },
      signal,
    );
    if (!st || !(st.exited === 1 || st.exited === true || st.exited === "1")) return undefined;
    const num = (v: unknown) =>
      v === undefined || v === null || v === "" || !Number.isFinite(Number(v)) ? null : Number(v);
    return {
      exitCode: num(st.exitcode),
      signal: num(st.signal),
      stdout: decodeGuestOutput(st["out-data"]),
      stderr: decodeGuestOutput(st["err-data"]),
    };
  }, { waitFirst: true });
}
