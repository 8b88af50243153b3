// VM-level reads and power/destroy actions, each robust to the ways PVE can
// fail: a 596 on a non-idempotent POST is answered by re-reading state, not
// by blindly repeating the call.

import { getLogger } from "@logtape/logtape";
import { BackendError } from "../../kit/backend.ts";
import { isTransient, missingVerdict, ProxmoxApiError, serverTextOf } from "../api/errors.ts";
import type { ApiClient, ReadOptions } from "../api/client.ts";
import type { Timing } from "../timing.ts";
import { waitTask } from "../api/tasks.ts";
import { pollUntil } from "../../async/poll.ts";

export type VmConfig = Record<string, unknown>;

export interface VmStatus {
  status: string;
  qmpstatus?: string;
  lock?: string;
  [k: string]: unknown;
}

/** A qemu entry of /cluster/resources?type=vm. */
export interface ResourceEntry {
  vmid: number;
  node: string;
  status: string;
  name?: string;
  tags?: string;
  lock?: string;
  template?: number;
  /** Configured memory (bytes) and vCPUs, once pvestatd reported the guest. */
  maxmem?: number;
  /** sockets × cores capped at the node's CPUs, or `vcpus`. */
  maxcpu?: number;
  /** Its HA resource's requested state, when HA manages it. */
  hastate?: string;
}

/** The part of the backend's Timing that VM reads and actions use. */
export type VmTiming = Pick<Timing, "task" | "settleMs" | "actionAttempts" | "destroyedGraceMs">;

const log = getLogger(["bigfleet", "proxmox"]);

/** Where a VM is: its node and VMID (what a host ref names). */
export interface VmAt {
  readonly node: string;
  readonly vmid: number;
}

/**
 * One VM to act on: where it is and the client that reaches it. Every per-VM
 * read and action below takes one; the backend's steps, which hold the client
 * in their context, take a VmAt and make it with vmOf.
 */
export interface VmRef extends VmAt {
  readonly api: ApiClient;
}

/** The VM at `at`, reached through this backend's client. */
export function vmOf(ctx: { api: ApiClient }, at: VmAt): VmRef {
  return { api: ctx.api, node: at.node, vmid: at.vmid };
}

/** A VM found where it lives now, with the config read there. */
export interface Located {
  node: string;
  vmid: number;
  config: VmConfig;
}

/** The API path of VM `vmid` on `node`; every per-VM call goes below it. */
export function vmPath(vm: VmAt): string {
  return `/nodes/${vm.node}/qemu/${vm.vmid}`;
}

/**
 * Whether an error means "no such VM on this node". A legacy server read over
 * fetch gives a bare 500 with no text; then the listing decides: missing
 * unless it shows the VM on this very node. (Without VM.Audit the listing is
 * empty, so a bare 500 then counts as missing: the residual legacy risk.)
 */
export async function isMissingHere(
  vm: VmRef,
  err: unknown,
  signal: AbortSignal,
): Promise<boolean> {
  const { api, node, vmid } = vm;
  const verdict = missingVerdict(err);
  if (verdict !== "unknown") return verdict === "missing";
  try {
    const hit = (await listResources(api, signal)).find((e) => e.vmid === vmid);
    return hit === undefined || hit.node !== node;
  } catch {
    // The listing cannot tell either: not "missing", so the caller goes on with the original error.
    return false;
  }
}

/** GET a VM sub-resource; null when the VM does not exist on that node. */
async function readVm<T>(
  vm: VmRef,
  sub: string,
  signal: AbortSignal,
  read?: ReadOptions,
): Promise<T | null> {
  const { api } = vm;
  try {
    return await api.get<T>(`${vmPath(vm)}/${sub}`, undefined, signal, read);
  } catch (err) {
    if (!signal.aborted && await isMissingHere(vm, err, signal)) return null;
    throw err;
  }
}

export async function readConfig(
  vm: VmRef,
  signal: AbortSignal,
  read?: ReadOptions,
): Promise<VmConfig | null> {
  const c = await readVm<VmConfig>(vm, "config", signal, read);
  return c === null ? null : c ?? {};
}

/** A config as `GET .../pending` shows it: current values, and the keys with a change pending. */
export interface PendingView {
  current: VmConfig;
  /** Keys with a pending value or a pending delete (applied at the next start when running). */
  pending: Set<string>;
}

/**
 * The VM's current config and its pending changes; null when the VM does
 * not exist on that node. GET config shows pending values as if applied
 * (docs/proxmox-notes.md "Pending changes"), so only this tells what runs.
 */
export async function readPending(
  vm: VmRef,
  signal: AbortSignal,
): Promise<PendingView | null> {
  const list = await readVm<unknown[]>(vm, "pending", signal);
  if (list === null) return null;
  const view: PendingView = { current: {}, pending: new Set() };
  for (const e of Array.isArray(list) ? list : []) {
    const r = e as Record<string, unknown>;
    if (typeof r?.key !== "string") continue;
    if (r.value !== undefined) view.current[r.key] = r.value;
    if (r.pending !== undefined || Number(r.delete ?? 0) !== 0) view.pending.add(r.key);
  }
  return view;
}

/** readPending of a VM the caller just made or changed: its absence is an error. */
export async function readPendingHere(vm: VmRef, signal: AbortSignal): Promise<PendingView> {
  const view = await readPending(vm, signal);
  if (view === null) throw new BackendError(`VM ${vm.vmid} vanished from ${vm.node}`);
  return view;
}

export function readStatus(
  vm: VmRef,
  signal: AbortSignal,
): Promise<VmStatus | null> {
  return readVm<VmStatus>(vm, "status/current", signal);
}

export async function listResources(
  api: ApiClient,
  signal: AbortSignal,
): Promise<ResourceEntry[]> {
  const all = await api.get<unknown[]>("/cluster/resources", { type: "vm" }, signal);
  const out: ResourceEntry[] = [];
  for (const e of Array.isArray(all) ? all : []) {
    const r = e as Record<string, unknown>;
    // type=vm also returns lxc guests.
    if (r?.type !== "qemu") continue;
    const vmid = Number(r.vmid ?? String(r.id ?? "").replace(/^qemu\//, ""));
    if (!Number.isInteger(vmid) || typeof r.node !== "string") continue;
    out.push({
      vmid,
      node: r.node,
      status: typeof r.status === "string" ? r.status : "unknown",
      name: typeof r.name === "string" ? r.name : undefined,
      tags: typeof r.tags === "string" ? r.tags : undefined,
      lock: typeof r.lock === "string" && r.lock !== "" ? r.lock : undefined,
      template: Number(r.template ?? 0),
      ...(typeof r.maxmem === "number" ? { maxmem: r.maxmem } : {}),
      ...(typeof r.maxcpu === "number" ? { maxcpu: r.maxcpu } : {}),
      ...(typeof r.hastate === "string" ? { hastate: r.hastate } : {}),
    });
  }
  return out;
}

/** The lock we must wait out before acting on a VM (suspended is a state, not a transient lock). */
export function blockingLock(lock: unknown): string | null {
  return typeof lock === "string" && lock !== "" && lock !== "suspended" ? lock : null;
}

/**
 * POST status/start or status/stop and wait for its task. start/stop are not
 * idempotent calls but have an observable end state, so an ambiguous failure
 * (596 & co.) is answered by reading that state before trying again.
 */
async function powerAction(
  vm: VmRef,
  want: "running" | "stopped",
  timing: VmTiming,
  signal: AbortSignal,
): Promise<"done" | "gone"> {
  const { api, node, vmid } = vm;
  const action = want === "running" ? "start" : "stop";
  return await pollUntil<"done" | "gone">(signal, timing.settleMs, async (call) => {
    try {
      const upid = await api.post(`${vmPath(vm)}/status/${action}`, undefined, signal);
      await waitTask(api, upid, {
        what: `${action} of VM ${vmid}`,
        timing: timing.task,
        effect: async (signal) => {
          const st = await readStatus(vm, signal);
          if (st === null) return want === "stopped" ? "done" : { failed: "the VM is gone" };
          return st.status === want ? "done" : undefined;
        },
      }, signal);
      return "done";
    } catch (err) {
      if (signal.aborted) throw signal.reason;
      if (await isMissingHere(vm, err, signal)) return "gone";
      // A concurrent or earlier start (e.g. one behind a lost 596) already did the job.
      if (want === "running" && /already running/i.test(serverTextOf(err))) return "done";
      if (!isTransient(err) || call + 1 >= timing.actionAttempts) throw err;
      log.warn("{action} of VM {vmid} got an ambiguous failure; re-reading its state", {
        action,
        vmid,
        node,
        error: (err as Error).message,
      });
      const st = await readStatus(vm, signal);
      if (st === null) return "gone";
      if (st.status === want) return "done";
      return undefined;
    }
  });
}

/** Start the VM and wait until status/current says running (HA starts finish early). */
export async function startVm(
  vm: VmRef,
  timing: VmTiming,
  signal: AbortSignal,
): Promise<void> {
  const { node, vmid } = vm;
  if ((await powerAction(vm, "running", timing, signal)) === "gone") {
    throw new BackendError(`VM ${vmid} does not exist on node ${node}`);
  }
  await waitStatus(vm, "running", timing, signal);
}

/** Hard-stop the VM (a no-op if stopped) and wait until it reads stopped. */
export async function stopVm(
  vm: VmRef,
  timing: VmTiming,
  signal: AbortSignal,
): Promise<void> {
  if ((await powerAction(vm, "stopped", timing, signal)) === "gone") return;
  await waitStatus(vm, "stopped", timing, signal);
}

/** Poll status/current until it reports `want` (bounded by the caller's signal). */
async function waitStatus(
  vm: VmRef,
  want: "running" | "stopped",
  timing: VmTiming,
  signal: AbortSignal,
): Promise<void> {
  const { node, vmid } = vm;
  await pollUntil(signal, timing.settleMs, async (call) => {
    const st = await readStatus(vm, signal);
    if (st === null) {
      if (want === "stopped") return true;
      throw new BackendError(`VM ${vmid} disappeared from node ${node} while starting`);
    }
    if (st.status === want) return true;
    if (call === 0) log.debug("waiting for VM {vmid} to be {want}", { vmid, node, want });
    return undefined;
  });
}

/**
 * A VM left as destroy_vm's config stub (`lock: destroyed`, nothing else:
 * the disks are already freed) longer than a destroy takes to finish: its
 * task died before removing the config, and only root can clear it
 * (docs/proxmox-notes.md "Destroy and leaked volumes").
 */
export class DestroyStubError extends BackendError {
  override name = "DestroyStubError";
  constructor(readonly node: string, readonly vmid: number, graceMs: number) {
    super(
      `VM ${vmid} on ${node} is left with lock: destroyed for over ${
        Math.round(graceMs / 1000)
      }s: a destroy task died after freeing its disks and before removing its config; only ` +
        `root can remove what is left: qm unlock ${vmid} && qm destroy ${vmid} (on ${node}), or ` +
        `delete /etc/pve/nodes/${node}/qemu-server/${vmid}.conf`,
    );
  }
}

/**
 * Wait until the VM has no blocking lock. Returns the last config, or null
 * if it vanished. `lock: destroyed` is waited on for destroyedGraceMs only,
 * then reported as a DestroyStubError.
 */
export async function waitUnlocked(
  vm: VmRef,
  timing: VmTiming,
  signal: AbortSignal,
): Promise<VmConfig | null> {
  const { node, vmid } = vm;
  let stubSince: number | null = null;
  return await pollUntil(signal, timing.settleMs, async (call) => {
    const cfg = await readConfig(vm, signal);
    if (cfg === null) return null;
    const lock = blockingLock(cfg.lock);
    if (lock === null) return cfg;
    if (lock === "destroyed") {
      stubSince ??= Date.now();
      if (Date.now() - stubSince >= timing.destroyedGraceMs) {
        throw new DestroyStubError(node, vmid, timing.destroyedGraceMs);
      }
    }
    if (call === 0) log.info("VM {vmid} is locked ({lock}); waiting", { vmid, node, lock });
    return undefined;
  });
}

/** 403s name the missing privilege; surface that rather than a generic failure. */
export function isPermissionError(err: unknown): boolean {
  return err instanceof ProxmoxApiError && err.status === 403;
}
