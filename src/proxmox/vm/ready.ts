// The readiness gate (docs/configuration.md "Bootstrap and readiness"): a
// machine is CONFIGURED only once its node has joined and is Ready, not when
// the bootstrap hook exits 0 (a `kubeadm join` returns before the kubelet has
// registered the node and before the node turns Ready). After the hook the
// backend runs a check in the guest through the agent until it exits 0, or
// fails Configure with what it checked and what the check said last.

import { getLogger } from "@logtape/logtape";
import type { ReadyGate } from "../../config/types.ts";
import { BackendError } from "../../kit/backend.ts";
import { describeExit, type ExecResult, runCommand, tail } from "./agent.ts";
import { type Located, vmOf } from "./vm.ts";
import type { ProxmoxContext } from "../context.ts";
import { isTransient, serverTextOf } from "../api/errors.ts";
import { sleep } from "../../async/sleep.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/**
 * The built-in check, for a kubeadm node: the kubelet's healthz, then the
 * node's Ready condition read with the kubelet's own kubeconfig (a node may
 * read its own Node object). Each step prints what it saw when it fails.
 * The kubelet registers the node under its lower-cased host name.
 */
export const BUILTIN_READY_SCRIPT = [
  "h=http://127.0.0.1:10248/healthz",
  // busybox wget dies of SIGSEGV with -T (1.35), so timeout(1) bounds it instead.
  "if command -v curl >/dev/null 2>&1; then " +
  'out=$(curl -fsS -m 5 "$h" 2>&1); else out=$(timeout 10 wget -q -O - "$h" 2>&1); fi',
  'if [ "$out" != ok ]; then echo "kubelet healthz $h: ${out:-no answer}"; exit 1; fi',
  "kc=/etc/kubernetes/kubelet.conf",
  "n=$(hostname | tr '[:upper:]' '[:lower:]')",
  'st=$(kubectl --kubeconfig="$kc" --request-timeout=10s get node "$n" ' +
  `-o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>&1)`,
  'if [ "$st" != True ]; then echo "node $n Ready condition (kubectl --kubeconfig=$kc): ${st:-empty}"; exit 1; fi',
].join("\n");

export const BUILTIN_READY_EXEC: readonly string[] = ["/bin/sh", "-c", BUILTIN_READY_SCRIPT];

const BUILTIN_WHAT = "kubelet healthz (127.0.0.1:10248) and the node's Ready condition " +
  "(kubectl --kubeconfig=/etc/kubernetes/kubelet.conf)";

/** The argv the gate runs, and how to name it in an error. */
export function readyCommand(gate: ReadyGate): { argv: string[]; what: string } {
  if (gate.exec === null) return { argv: [...BUILTIN_READY_EXEC], what: BUILTIN_WHAT };
  return { argv: [...gate.exec], what: `readiness check ${gate.exec.join(" ")}` };
}

/**
 * When the gate gives up: its own --ready-timeout after the hook, and in any
 * case a margin (a fifteenth of Configure's timeout, at most 30 s) before the
 * kit's Configure deadline, so the machine fails with the gate's own message.
 */
export function readyDeadline(
  gate: ReadyGate,
  configureStartMs: number,
  configureTimeoutMs: number,
  nowMs: number,
): number {
  const margin = Math.min(30_000, Math.ceil(configureTimeoutMs / 15));
  const kitBound = configureStartMs + configureTimeoutMs - margin;
  return gate.timeoutMs > 0 ? Math.min(nowMs + gate.timeoutMs, kitBound) : kitBound;
}

/** One line of what a check printed, for logs and the error. */
function outputOf(r: ExecResult): string {
  return tail(`${r.stdout}\n${r.stderr}`.trim(), 512).replace(/\s*\n\s*/g, "; ");
}

/**
 * Run the check until it exits 0 (first at once, then every `timing.readyPollMs`:
 * each check is an agent exec plus its status polls, and pvedaemon has few
 * workers). Agent hiccups and proxy failures count as a failed check; anything
 * else (a permission error) ends the wait.
 */
export async function waitReady(
  ctx: ProxmoxContext,
  loc: Located,
  gate: ReadyGate,
  deadlineMs: number,
  signal: AbortSignal,
): Promise<void> {
  const { timing } = ctx;
  const { argv, what } = readyCommand(gate);
  const started = Date.now();
  let checks = 0;
  let last = "no check finished";
  for (;;) {
    const left = deadlineMs - Date.now();
    if (left <= 0) break;
    checks++;
    // A check that hangs (an unreachable API server) must not outlive the gate.
    const bound = AbortSignal.any([signal, AbortSignal.timeout(left)]);
    try {
      const r = await runCommand(vmOf(ctx, loc), argv, timing.exec, bound);
      if (r.exitCode === 0) {
        log.info("node in VM {vmid} is Ready after {checks} checks ({seconds} s)", {
          vmid: loc.vmid,
          node: loc.node,
          checks,
          seconds: Math.round((Date.now() - started) / 1000),
        });
        return;
      }
      last = `${describeExit(r)}: ${outputOf(r) || "no output"}`;
    } catch (err) {
      if (signal.aborted) throw signal.reason;
      // Cut short by the deadline: the last check that finished says more.
      if (bound.aborted) break;
      if (!isTransient(err) && !/guest agent|got timeout|is not running/i.test(serverTextOf(err))) {
        throw err;
      }
      last = `agent: ${(err as Error).message}`;
    }
    const wait = Math.min(timing.readyPollMs, deadlineMs - Date.now());
    if (wait <= 0) break;
    await sleep(wait, signal);
  }
  const seconds = Math.round((Date.now() - started) / 1000);
  throw new BackendError(
    `node in VM ${loc.vmid} not Ready ${seconds}s after the bootstrap hook: checked ${what} ` +
      `${checks} times; last: ${last}`,
  );
}
