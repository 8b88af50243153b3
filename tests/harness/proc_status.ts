// Memory and CPU of a child process we started, from Linux /proc: resident
// set now (VmRSS), its high-water mark (VmHWM, resettable), and CPU time.
// Deno opens /proc only with --allow-all, so the files are read (and
// clear_refs written) by a `cat`/`sh` child: tests and benches run with
// --allow-run but not --allow-all.

const KIB = 1024;

function run(cmd: string, args: string[]): string {
  const out = new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped" }).outputSync();
  if (!out.success) {
    throw new Error(`${cmd} ${args.join(" ")}: ${new TextDecoder().decode(out.stderr).trim()}`);
  }
  return new TextDecoder().decode(out.stdout);
}

function readProc(path: string): string {
  return run("cat", [path]);
}

function statusField(pid: number, field: "VmRSS" | "VmHWM"): number {
  const text = readProc(`/proc/${pid}/status`);
  const m = text.match(new RegExp(`^${field}:\\s+(\\d+) kB`, "m"));
  if (!m) throw new Error(`/proc/${pid}/status has no ${field}`);
  return Number(m[1]) * KIB;
}

/** Resident set size in bytes. */
export function rssBytes(pid: number): number {
  return statusField(pid, "VmRSS");
}

/** Peak resident set size in bytes since start or the last resetPeak. */
export function peakRssBytes(pid: number): number {
  return statusField(pid, "VmHWM");
}

/** Start a new VmHWM window at the current RSS (Linux clear_refs "5"). */
export function resetPeak(pid: number): void {
  run("sh", ["-c", `echo 5 > /proc/${Number(pid)}/clear_refs`]);
}

/** User + system CPU time in milliseconds. */
export function cpuMs(pid: number): number {
  const stat = readProc(`/proc/${pid}/stat`);
  // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
  const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  const ticks = Number(rest[11]) + Number(rest[12]);
  return ticks * 1000 / CLOCK_TICKS;
}

/** USER_HZ: 100 on every Linux ABI Deno runs on. */
const CLOCK_TICKS = 100;

export const MIB = 1024 * 1024;
