// The scripted guest behind agent/exec: a tiny POSIX-shell subset over the
// VM's in-memory files, enough for bootstrap delivery (write, concatenate,
// base64-decode, run) and `kubectl drain`. The bootstrap blob and kubectl are
// not executed; their outcome comes from the fault switches.

import type { VmRecord } from "./state.ts";
import type { SimFaults } from "./types.ts";

export interface GuestOutcome {
  exitcode?: number;
  signal?: number;
  stdout: Uint8Array;
  stderr: Uint8Array;
  kind: "bootstrap" | "drain" | "shell" | "custom" | "ready";
  extraMs: number;
}

export interface GuestEnv {
  vm: VmRecord;
  faults: SimFaults;
  bootstrapPath: string;
  bootstrapExec: string[];
  readyExec: readonly string[];
}

const enc = new TextEncoder();
const SHELLS = new Set(["sh", "/bin/sh", "/usr/bin/sh", "bash", "/bin/bash", "/usr/bin/bash"]);

class ExitSignal {
  constructor(readonly code: number) {}
}

interface Io {
  stdin: Uint8Array;
  out: number[];
  err: number[];
}

interface Redirect {
  fd: 0 | 1 | 2;
  op: ">" | ">>" | "<" | ">&";
  target: string;
}

interface SimpleCmd {
  argv: string[];
  redirs: Redirect[];
}

type Pipeline = SimpleCmd[];
interface Step {
  op: ";" | "&&" | "||";
  pipeline: Pipeline;
}

function push(buf: number[], data: Uint8Array | string): void {
  const b = typeof data === "string" ? enc.encode(data) : data;
  for (const x of b) buf.push(x);
}

class Guest {
  kind: GuestOutcome["kind"] = "shell";
  extraMs = 0;
  constructor(private env: GuestEnv) {}

  get vm() {
    return this.env.vm;
  }

  hostname(): string {
    return String(this.vm.config.name ?? `vm${this.vm.vmid}`);
  }

  // --- parsing --------------------------------------------------------------

  tokenize(src: string): string[] {
    const toks: string[] = [];
    let i = 0;
    let cur: string | null = null;
    const flush = () => {
      if (cur !== null) toks.push(cur);
      cur = null;
    };
    while (i < src.length) {
      const c = src[i];
      if (c === " " || c === "\t") {
        flush();
        i++;
      } else if (c === "\n" || c === ";") {
        flush();
        toks.push(";");
        i++;
      } else if (src.startsWith("&&", i) || src.startsWith("||", i)) {
        flush();
        toks.push(src.slice(i, i + 2));
        i += 2;
      } else if (c === "|") {
        flush();
        toks.push("|");
        i++;
      } else if (/^[12]?>>?(&[12])?/.test(src.slice(i)) && (cur === null || /^[12]$/.test(cur))) {
        const m = src.slice(i).match(/^([12]?)(>>?)(&[12])?/)!;
        const fd = cur ?? m[1];
        cur = null;
        toks.push(`\u0000${fd || "1"}${m[2]}${m[3] ?? ""}`);
        i += m[0].length;
      } else if (c === "<") {
        flush();
        toks.push("\u00000<");
        i++;
      } else if (c === "'") {
        const j = src.indexOf("'", i + 1);
        cur = (cur ?? "") + src.slice(i + 1, j < 0 ? src.length : j);
        i = j < 0 ? src.length : j + 1;
      } else if (c === '"') {
        let j = i + 1;
        let s = "";
        while (j < src.length && src[j] !== '"') {
          if (src[j] === "\\" && j + 1 < src.length) {
            s += src[j + 1];
            j += 2;
          } else s += src[j++];
        }
        cur = (cur ?? "") + this.expand(s);
        i = j + 1;
      } else if (c === "\\" && i + 1 < src.length) {
        cur = (cur ?? "") + src[i + 1];
        i += 2;
      } else if (c === "#" && cur === null) {
        while (i < src.length && src[i] !== "\n") i++;
      } else {
        let j = i;
        while (j < src.length && !` \t\n;|&<>'"\\`.includes(src[j])) j++;
        if (j === i) j = i + 1; // a lone '&' or '>' that matched nothing above
        cur = (cur ?? "") + this.expand(src.slice(i, j));
        i = j;
      }
    }
    flush();
    return toks;
  }

  expand(s: string): string {
    return s.replace(/\$\(hostname\)|`hostname`|\$HOSTNAME|\$\{HOSTNAME\}/g, () => this.hostname());
  }

  parse(src: string): Step[] {
    const steps: Step[] = [];
    let op: Step["op"] = ";";
    let pipeline: Pipeline = [];
    let cmd: SimpleCmd = { argv: [], redirs: [] };
    const toks = this.tokenize(src);
    const endCmd = () => {
      if (cmd.argv.length > 0 || cmd.redirs.length > 0) pipeline.push(cmd);
      cmd = { argv: [], redirs: [] };
    };
    const endPipeline = (next: Step["op"]) => {
      endCmd();
      if (pipeline.length > 0) steps.push({ op, pipeline });
      pipeline = [];
      op = next;
    };
    for (let i = 0; i < toks.length; i++) {
      const t = toks[i];
      if (t === ";" || t === "&&" || t === "||") endPipeline(t);
      else if (t === "|") endCmd();
      else if (t.startsWith("\u0000")) {
        const m = t.slice(1).match(/^([012])(>>|>|<)(&[12])?$/)!;
        const fd = Number(m[1]) as 0 | 1 | 2;
        if (m[3]) cmd.redirs.push({ fd, op: ">&", target: m[3].slice(1) });
        else cmd.redirs.push({ fd, op: m[2] as Redirect["op"], target: toks[++i] ?? "" });
      } else cmd.argv.push(t);
    }
    endPipeline(";");
    return steps;
  }

  // --- execution ------------------------------------------------------------

  runScript(src: string, io: Io): number {
    let status = 0;
    for (const step of this.parse(src)) {
      if (step.op === "&&" && status !== 0) continue;
      if (step.op === "||" && status === 0) continue;
      status = this.runPipeline(step.pipeline, io);
    }
    return status;
  }

  runPipeline(p: Pipeline, io: Io): number {
    let stdin = io.stdin;
    let status = 0;
    p.forEach((cmd, idx) => {
      const last = idx === p.length - 1;
      const sub: Io = { stdin, out: last ? io.out : [], err: io.err };
      status = this.runSimple(cmd, sub);
      if (!last) stdin = Uint8Array.from(sub.out);
    });
    return status;
  }

  runSimple(cmd: SimpleCmd, io: Io): number {
    let out = io.out;
    let err = io.err;
    let stdin = io.stdin;
    const writes: [string, number[], boolean][] = [];
    for (const r of cmd.redirs) {
      if (r.op === "<") {
        const f = this.vm.files.get(r.target);
        if (!f) {
          push(err, `sh: 1: cannot open ${r.target}: No such file\n`);
          return 2;
        }
        stdin = f;
      } else if (r.op === ">&") {
        if (r.fd === 2 && r.target === "1") err = out;
        if (r.fd === 1 && r.target === "2") out = err;
      } else {
        const buf: number[] = [];
        if (r.target !== "/dev/null") {
          if (!this.parentExists(r.target)) {
            push(err, `sh: 1: cannot create ${r.target}: Directory nonexistent\n`);
            return 2;
          }
          writes.push([r.target, buf, r.op === ">>"]);
        }
        if (r.fd === 2) err = buf;
        else out = buf;
      }
    }
    // Redirect targets are created (truncated) before the command runs.
    for (const [path, , append] of writes) {
      if (!append || !this.vm.files.has(path)) this.vm.files.set(path, new Uint8Array());
    }
    const status = cmd.argv.length > 0 ? this.runArgv(cmd.argv, { stdin, out, err }) : 0;
    for (const [path, buf] of writes) {
      const prev = this.vm.files.get(path) ?? new Uint8Array();
      const next = new Uint8Array(prev.length + buf.length);
      next.set(prev);
      next.set(buf, prev.length);
      this.vm.files.set(path, next);
    }
    return status;
  }

  parentExists(path: string): boolean {
    const dir = path.slice(0, path.lastIndexOf("/")) || "/";
    return this.vm.dirs.has(dir);
  }

  isBootstrap(argv: string[]): string | null {
    const pre = this.env.bootstrapExec;
    if (
      argv.length === pre.length + 1 && pre.every((a, i) => argv[i] === a) &&
      this.vm.files.has(argv[pre.length])
    ) return argv[pre.length];
    const bp = this.env.bootstrapPath;
    if (argv.length === 1 && argv[0] === bp && this.vm.files.has(bp)) return bp;
    if (argv.length === 2 && SHELLS.has(argv[0]) && argv[1] === bp && this.vm.files.has(bp)) {
      return bp;
    }
    return null;
  }

  runArgv(argv: string[], io: Io): number {
    const f = this.env.faults;
    const boot = this.isBootstrap(argv);
    if (boot !== null) {
      this.kind = "bootstrap";
      this.extraMs += f.bootstrapDelayMs;
      this.vm.bootstrapRuns.push({
        path: boot,
        argv: [...argv],
        content: this.vm.files.get(boot)!.slice(),
        at: Date.now(),
      });
      push(io.out, f.bootstrapStdout);
      push(io.err, f.bootstrapStderr);
      // A join that succeeded: the kubelet starts, the node registers and later turns Ready.
      if (f.bootstrapExitCode === 0) this.vm.joinedAt = Date.now() + f.bootstrapDelayMs;
      return f.bootstrapExitCode;
    }
    const [cmd0, ...rawArgs] = argv;
    const cmd = cmd0.replace(/^\/(usr\/)?(s?bin)\//, "");
    // After "--" everything is an operand; the helpers below skip "-x" options,
    // so operands that look like options are simply not supported.
    const dd = rawArgs.indexOf("--");
    const args = dd >= 0 && !SHELLS.has(cmd0) && cmd !== "kubectl"
      ? [...rawArgs.slice(0, dd), ...rawArgs.slice(dd + 1)]
      : rawArgs;
    switch (cmd) {
      case "true":
      case ":":
      case "umask":
      case "set":
      case "sync":
      case "sleep":
      case "chmod":
      case "chown":
      case "systemctl":
        return 0;
      case "false":
        return 1;
      case "exit":
        throw new ExitSignal(Number(args[0] ?? 0));
      case "exec":
      case "sudo":
      case "nohup":
        return args.length ? this.runArgv(args, io) : 0;
      case "timeout": {
        const rest = args.filter((a) => a.startsWith("-"));
        return this.runArgv(args.slice(rest.length + 1), io);
      }
      case "env":
        return this.runArgv(args.filter((a) => !a.includes("=")), io);
      case "echo": {
        const n = args[0] === "-n";
        push(io.out, (n ? args.slice(1) : args).join(" ") + (n ? "" : "\n"));
        return 0;
      }
      case "printf": {
        let i = 1;
        const s = (args[0] ?? "").replace(/%s/g, () => args[i++] ?? "").replace(/\\n/g, "\n");
        push(io.out, s);
        return 0;
      }
      case "hostname":
        push(io.out, this.hostname() + "\n");
        return 0;
      case "cat":
        return this.cat(args, io);
      case "base64":
        return this.base64(args, io);
      case "rm":
        return this.rm(args, io);
      case "mkdir":
        return this.mkdir(args, io);
      case "touch":
        for (const p of args) if (!this.vm.files.has(p)) this.vm.files.set(p, new Uint8Array());
        return 0;
      case "mv":
      case "cp": {
        const [src, dst] = args.filter((a) => !a.startsWith("-"));
        const data = this.vm.files.get(src);
        if (!data) {
          push(io.err, `${cmd}: cannot stat '${src}': No such file or directory\n`);
          return 1;
        }
        this.vm.files.set(dst, data.slice());
        if (cmd === "mv") this.vm.files.delete(src);
        return 0;
      }
      case "test":
      case "[":
        return this.test(cmd === "[" ? args.slice(0, -1) : args);
      case "kubectl":
        return this.kubectl(argv, args, io);
    }
    if (SHELLS.has(cmd0) || SHELLS.has(cmd)) {
      const script = args.find((a) => !a.startsWith("-"));
      if (args[0] !== "-c" && script !== undefined) return this.runFile(script, io);
      const src = args[0] === "-c" ? args[1] ?? "" : new TextDecoder().decode(io.stdin);
      try {
        return this.runScript(src, io);
      } catch (e) {
        if (e instanceof ExitSignal) return e.code;
        throw e;
      }
    }
    if (cmd0.startsWith("/") && this.vm.files.has(cmd0)) return this.runFile(cmd0, io);
    push(io.err, `sh: 1: ${cmd0}: not found\n`);
    return 127;
  }

  runFile(path: string, io: Io): number {
    const data = this.vm.files.get(path);
    if (!data) {
      push(io.err, `sh: 0: cannot open ${path}: No such file\n`);
      return 2;
    }
    try {
      return this.runScript(new TextDecoder().decode(data), io);
    } catch (e) {
      if (e instanceof ExitSignal) return e.code;
      throw e;
    }
  }

  cat(args: string[], io: Io): number {
    const files = args.filter((a) => a !== "-" && !a.startsWith("-"));
    if (files.length === 0) {
      push(io.out, io.stdin);
      return 0;
    }
    let status = 0;
    for (const p of files) {
      const d = this.vm.files.get(p);
      if (d) push(io.out, d);
      else {
        push(io.err, `cat: ${p}: No such file or directory\n`);
        status = 1;
      }
    }
    return status;
  }

  base64(args: string[], io: Io): number {
    const decode = args.includes("-d") || args.includes("--decode");
    const file = args.find((a) => !a.startsWith("-"));
    let data = io.stdin;
    if (file !== undefined) {
      const d = this.vm.files.get(file);
      if (!d) {
        push(io.err, `base64: ${file}: No such file or directory\n`);
        return 1;
      }
      data = d;
    }
    if (!decode) {
      push(io.out, btoa(String.fromCharCode(...data)) + "\n");
      return 0;
    }
    const text = new TextDecoder().decode(data).replace(/\s+/g, "");
    try {
      push(io.out, Uint8Array.from(atob(text), (c) => c.charCodeAt(0)));
      return 0;
    } catch {
      push(io.err, "base64: invalid input\n");
      return 1;
    }
  }

  rm(args: string[], io: Io): number {
    const force = args.some((a) => /^-[a-zA-Z]*f/.test(a));
    let status = 0;
    for (const p of args.filter((a) => !a.startsWith("-"))) {
      if (!this.vm.files.delete(p) && !force) {
        push(io.err, `rm: cannot remove '${p}': No such file or directory\n`);
        status = 1;
      }
    }
    return status;
  }

  mkdir(args: string[], io: Io): number {
    const parents = args.includes("-p");
    for (const p of args.filter((a) => !a.startsWith("-"))) {
      const parts = p.split("/").filter(Boolean);
      for (let i = 1; i <= parts.length; i++) {
        const d = "/" + parts.slice(0, i).join("/");
        if (i < parts.length && !this.vm.dirs.has(d) && !parents) {
          push(io.err, `mkdir: cannot create directory '${p}': No such file or directory\n`);
          return 1;
        }
        if (i === parts.length || parents) this.vm.dirs.add(d);
      }
    }
    return 0;
  }

  test(args: string[]): number {
    if (args[0] === "!") return this.test(args.slice(1)) === 0 ? 1 : 0;
    const [op, p] = args;
    const file = this.vm.files.get(p);
    switch (op) {
      case "-f":
      case "-e":
      case "-r":
        return file || (op === "-e" && this.vm.dirs.has(p)) ? 0 : 1;
      case "-s":
        return file && file.length > 0 ? 0 : 1;
      case "-d":
        return this.vm.dirs.has(p) ? 0 : 1;
    }
    return args.length === 1 && args[0] !== "" ? 0 : 1;
  }

  kubectl(argv: string[], args: string[], io: Io): number {
    if (args[0] !== "drain") return 0;
    const f = this.env.faults;
    this.kind = "drain";
    this.extraMs += f.drainDelayMs;
    this.vm.drains.push({ command: [...argv], at: Date.now() });
    const node = args.slice(1).find((a) => !a.startsWith("-")) ?? this.hostname();
    if (f.drainExitCode === 0) push(io.out, `node/${node} cordoned\nnode/${node} drained\n`);
    push(io.err, f.drainStderr);
    return f.drainExitCode;
  }
}

/**
 * The node's readiness check: kubelet's healthz answers once a bootstrap
 * joined, the Ready condition turns True faults.readyAfterMs later.
 */
function readyCheck(env: GuestEnv): GuestOutcome {
  const { vm, faults } = env;
  const after = faults.readyAfterMs;
  const joined = vm.joinedAt;
  const ready = joined !== undefined && after !== null && Date.now() >= joined + after;
  vm.readyChecks.push({ at: Date.now(), ready });
  const host = String(vm.config.name ?? `vm${vm.vmid}`);
  const out = ready
    ? ""
    : joined === undefined
    ? "kubelet healthz http://127.0.0.1:10248/healthz: curl: (7) Failed to connect\n"
    : `node ${host} Ready condition (kubectl --kubeconfig=/etc/kubernetes/kubelet.conf): False\n`;
  return {
    exitcode: ready ? 0 : 1,
    stdout: enc.encode(out),
    stderr: new Uint8Array(),
    kind: "ready",
    extraMs: 0,
  };
}

/** Runs an exec `command` (argv, no shell) with stdin bytes in the VM's guest. */
export function runInGuest(env: GuestEnv, argv: string[], stdin: Uint8Array): GuestOutcome {
  const custom = env.faults.execHandler?.(argv, stdin, env.vm.vmid);
  if (custom) {
    const b = (x: string | Uint8Array | undefined) =>
      typeof x === "string" ? enc.encode(x) : x ?? new Uint8Array();
    return {
      exitcode: custom.signal !== undefined ? undefined : custom.exitcode ?? 0,
      signal: custom.signal,
      stdout: b(custom.stdout),
      stderr: b(custom.stderr),
      kind: "custom",
      extraMs: custom.extraMs ?? 0,
    };
  }
  const r = env.readyExec;
  if (argv.length === r.length && argv.every((a, i) => a === r[i])) return readyCheck(env);
  const g = new Guest(env);
  const io: Io = { stdin, out: [], err: [] };
  let code: number;
  try {
    code = g.runArgv(argv, io);
  } catch (e) {
    if (!(e instanceof ExitSignal)) throw e;
    code = e.code;
  }
  return {
    exitcode: code,
    stdout: Uint8Array.from(io.out),
    stderr: Uint8Array.from(io.err),
    kind: g.kind,
    extraMs: g.extraMs,
  };
}
