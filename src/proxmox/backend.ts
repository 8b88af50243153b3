// The Proxmox implementation of the kit's Backend (product.md §5).

import { getLogger } from "@logtape/logtape";
import type { Config } from "../config/types.ts";
import {
  type Backend,
  BackendError,
  type ConfigureSpec,
  type HostedMachine,
  type ManagedVm,
  type SlotSpec,
} from "../kit/backend.ts";
import {
  agentEnabled,
  describeExit,
  runCommand,
  tail,
  waitForAgent,
  writeGuestFile,
} from "./agent.ts";
import {
  isTransient,
  ProxmoxApiError,
  serverTextOf,
  TlsTrustError,
  TransportError,
} from "./errors.ts";
import { type ApiClient, createApiClient } from "./http.ts";
import {
  buildDescription,
  hostRefOf,
  machineTag,
  MANAGED_TAG,
  parseHostRef,
  parseMarker,
  parseTags,
  tagsFor,
  vmName,
} from "./naming.ts";
import { type PollTiming, waitTask } from "./tasks.ts";
import { normalizeFingerprint, pinnedTransport, probeTrust } from "./tls.ts";
import { fetchTransport, type Transport } from "./transport.ts";
import { createMutex, mapLimit, secondsSince, sleep } from "./util.ts";
import {
  blockingLock,
  destroyVm,
  isPermissionError,
  listResources,
  readConfig,
  readStatus,
  startVm,
  stopVm,
  type VmConfig,
  vmPath,
  type VmTiming,
  waitUnlocked,
} from "./vm.ts";

export type ApiOp =
  | "CloneVM"
  | "DeleteVM"
  | "DescribeManaged"
  | "EnsureRunning"
  | "Configure"
  | "Drain";

/** Poll intervals and limits; tests shrink them, production uses the defaults. */
export interface Timing {
  task: PollTiming;
  exec: PollTiming;
  agentPollMs: number;
  agentTimeoutMs: number;
  settleMs: number;
  requestTimeoutMs: number;
  readAttempts: number;
  retryBaseMs: number;
  actionAttempts: number;
  /** How long to look for a clone whose POST failed ambiguously (596). */
  cloneSettleMs: number;
  /** Clone attempts after lost VMID races. */
  raceAttempts: number;
  probeTimeoutMs: number;
}

export interface ProxmoxDeps {
  observe?: (op: ApiOp, outcome: "ok" | "error", seconds: number) => void;
  timing?: Partial<Timing>;
}

export const DEFAULT_TIMING: Timing = {
  task: { initialMs: 200, maxMs: 2000 },
  exec: { initialMs: 100, maxMs: 1000 },
  agentPollMs: 500,
  agentTimeoutMs: 300_000,
  settleMs: 1000,
  requestTimeoutMs: 60_000,
  readAttempts: 4,
  retryBaseMs: 500,
  actionAttempts: 3,
  cloneSettleMs: 10_000,
  raceAttempts: 5,
  probeTimeoutMs: 15_000,
};

const log = getLogger(["bigfleet", "proxmox"]);

/** Task/sync failure texts of a lost newid race (proxmox-api.md §7). */
const RACE_RE = /config file already exists|can't lock file '[^']*lock-\d+\.conf'|File exists/i;

interface Located {
  node: string;
  vmid: number;
  config: VmConfig;
}

/** Pick the transport for the configured trust material; there is no unverified mode. */
function makeTransport(caPem: string | null, fingerprint: string | null): Transport {
  if (fingerprint !== null) return pinnedTransport({ caPem, fingerprint });
  if (caPem !== null) return fetchTransport(caPem);
  throw new BackendError(
    "proxmox: no TLS trust material (--proxmox-ca-file or --proxmox-tls-fingerprint)",
  );
}

export async function createProxmoxBackend(
  cfg: Config,
  deps: ProxmoxDeps = {},
): Promise<Backend> {
  const px = cfg.proxmox;
  if (px === null) throw new BackendError("proxmox backend selected without proxmox settings");
  const timing: Timing = { ...DEFAULT_TIMING, ...deps.timing };
  const vmTiming: VmTiming = {
    task: timing.task,
    settleMs: timing.settleMs,
    actionAttempts: timing.actionAttempts,
  };
  const fingerprint = px.fingerprint === null ? null : normalizeFingerprint(px.fingerprint);
  const baseUrl = new URL(px.apiUrl);
  if (baseUrl.protocol !== "https:") {
    throw new BackendError("proxmox API URL must be https:// (the token is a secret)");
  }

  // Fail loudly on a wrong CA or pin before any request (and token) goes out.
  try {
    await probeTrust(
      baseUrl,
      { caPem: px.caPem, fingerprint },
      AbortSignal.timeout(timing.probeTimeoutMs),
    );
  } catch (err) {
    if (err instanceof TlsTrustError) throw err;
    // Unreachable right now is not fatal: every later connection is verified anyway.
    log.warn("could not reach the Proxmox API for a TLS check: {error}", {
      error: (err as Error).message,
    });
  }

  const api: ApiClient = createApiClient({
    baseUrl: px.apiUrl,
    tokenId: px.tokenId,
    tokenSecret: px.tokenSecret,
    transport: makeTransport(px.caPem, fingerprint),
    requestTimeoutMs: timing.requestTimeoutMs,
    readAttempts: timing.readAttempts,
    retryBaseMs: timing.retryBaseMs,
  });

  const nodes = [...px.nodes];
  const cloneMutex = createMutex();
  /** VMIDs handed to a clone POST whose task has not finished: nextid cannot see them yet. */
  const reserved = new Set<number>();
  /** VMIDs we just lost a race on → until when to skip them (the winner may not show in nextid yet). */
  const lostRace = new Map<number, number>();
  /** Clones this process started, vmid → machine id: recognisable before PVE writes the name. */
  const cloning = new Map<number, string>();
  /** One Create per machine at a time inside this process; a second call joins the first. */
  const creating = new Map<string, Promise<Located>>();

  async function observed<T>(op: ApiOp, fn: () => Promise<T>): Promise<T> {
    const t0 = performance.now();
    let outcome: "ok" | "error" = "error";
    try {
      const r = await fn();
      outcome = "ok";
      return r;
    } finally {
      try {
        deps.observe?.(op, outcome, secondsSince(t0));
      } catch {
        // Metrics must never break an operation.
      }
    }
  }

  /** The node a VMID lives on now, or null if no readable node has it. */
  async function relocate(vmid: number, skip: string, signal: AbortSignal): Promise<string | null> {
    try {
      const hit = (await listResources(api, signal)).find((e) => e.vmid === vmid);
      if (hit) return hit.node;
    } catch (err) {
      if (!isPermissionError(err)) throw err;
    }
    // The listing hides VMs without VM.Audit: ask the candidate nodes directly.
    for (const n of nodes) {
      if (n === skip) continue;
      try {
        if ((await readConfig(api, n, vmid, signal)) !== null) return n;
      } catch (err) {
        if (signal.aborted) throw err;
      }
    }
    return null;
  }

  function ownedBy(config: VmConfig, machineId: string): "ours" | "foreign" {
    const marker = parseMarker(config.description);
    if (marker !== null) return marker.machineId === machineId ? "ours" : "foreign";
    return parseTags(config.tags).includes(machineTag(machineId)) ? "ours" : "foreign";
  }

  /**
   * Follow one candidate VM until it is decidable: ours (marker matches, no
   * lock left), or not. An in-flight clone shows only `lock: clone` until its
   * first disk is copied, so it is waited on rather than judged.
   */
  async function resolveCandidate(
    node: string,
    vmid: number,
    machineId: string,
    signal: AbortSignal,
  ): Promise<Located | null> {
    let logged = false;
    for (let moves = 0; moves < 4;) {
      const config = await readConfig(api, node, vmid, signal);
      if (config === null) {
        // A finished clone moves to its target node.
        const n = await relocate(vmid, node, signal);
        if (n === null || n === node) return null;
        node = n;
        moves++;
        continue;
      }
      const marker = parseMarker(config.description);
      const mine = cloning.get(vmid);
      const decided = marker !== null || (mine !== undefined && blockingLock(config.lock) === null);
      if (decided || config.lock !== "clone") {
        const owner = marker?.machineId ?? mine;
        if (owner !== machineId) return null;
        if (blockingLock(config.lock) === null) return { node, vmid, config };
      }
      if (!logged) {
        log.info("VM {vmid} is being cloned; waiting to see whose it is", {
          vmid,
          node,
          machineId,
        });
        logged = true;
      }
      await sleep(timing.settleMs, signal);
    }
    return null;
  }

  /** A VM already made for this machine (a previous or concurrent attempt), or null. */
  async function findExisting(
    machineId: string,
    signal: AbortSignal,
    extra: { node: string; vmid: number }[] = [],
  ): Promise<Located | null> {
    const tag = machineTag(machineId);
    const name = vmName(machineId);
    let entries: { node: string; vmid: number }[] = [];
    try {
      entries = (await listResources(api, signal)).filter((e) =>
        e.template !== 1 &&
        (parseTags(e.tags).includes(tag) || e.lock === "clone" || e.name === name ||
          e.name === undefined || cloning.get(e.vmid) === machineId)
      );
    } catch (err) {
      if (!isPermissionError(err)) throw err;
    }
    for (const [vmid, owner] of cloning) {
      if (owner === machineId && !entries.some((e) => e.vmid === vmid)) {
        entries.push({ node: nodes[0], vmid });
      }
    }
    for (const x of extra) if (!entries.some((e) => e.vmid === x.vmid)) entries.push(x);
    const found = (await mapLimit(
      entries,
      8,
      (e) =>
        resolveCandidate(e.node, e.vmid, machineId, signal).catch((err) => {
          if (signal.aborted) throw err;
          // One unreadable candidate must not block Create; it is logged and skipped.
          log.warn("could not inspect VM {vmid}: {error}", {
            vmid: e.vmid,
            error: (err as Error).message,
          });
          return null;
        }),
    )).filter((x): x is Located => x !== null);
    if (found.length > 1) {
      log.warn("several VMs carry the marker of machine {machineId}: {vmids}", {
        machineId,
        vmids: found.map((f) => f.vmid),
      });
    }
    return found.sort((a, b) => a.vmid - b.vmid)[0] ?? null;
  }

  /** The template's node (and config when readable), checked for an enabled guest agent. */
  async function locateTemplate(vmid: number, signal: AbortSignal): Promise<string> {
    let listed: string | null = null;
    try {
      listed = (await listResources(api, signal)).find((e) => e.vmid === vmid)?.node ?? null;
    } catch (err) {
      if (!isPermissionError(err)) throw err;
    }
    const order = listed ? [listed, ...nodes.filter((n) => n !== listed)] : nodes;
    for (const node of order) {
      let config: VmConfig | null;
      try {
        config = await readConfig(api, node, vmid, signal);
      } catch (err) {
        if (signal.aborted) throw err;
        if (node === listed && isPermissionError(err)) return node;
        continue;
      }
      if (config === null) continue;
      if (!agentEnabled(config.agent)) {
        throw new BackendError(
          `template VM ${vmid} does not enable the QEMU guest agent (config 'agent'); clones could never be bootstrapped`,
        );
      }
      return node;
    }
    throw new BackendError(`template VM ${vmid} not found on any node (${nodes.join(", ")})`);
  }

  /** A VMID nobody else in this process is cloning into (nextid reserves nothing). */
  async function allocateVmid(signal: AbortSignal): Promise<number> {
    const parse = (v: unknown) => {
      const n = Number(v); // nextid is a string on real PVE; accept numbers too
      if (!Number.isInteger(n) || n < 100) {
        throw new BackendError(`unexpected /cluster/nextid answer ${JSON.stringify(v)}`);
      }
      return n;
    };
    const now = Date.now();
    for (const [id, until] of lostRace) if (until <= now) lostRace.delete(id);
    let id = parse(await api.get("/cluster/nextid", undefined, signal));
    for (let tries = 0; tries < 10_000; tries++, id++) {
      if (reserved.has(id) || lostRace.has(id)) continue;
      if (tries === 0) return id;
      try {
        return parse(await api.get("/cluster/nextid", { vmid: id }, signal));
      } catch (err) {
        if (!(err instanceof ProxmoxApiError && err.status === 400)) throw err;
      }
    }
    throw new BackendError("no free VMID found");
  }

  /** PUT sizing, tags and marker; skipped when the config already matches. */
  async function applySizing(
    loc: Located,
    slot: SlotSpec,
    signal: AbortSignal,
  ): Promise<void> {
    const want = {
      cores: slot.vcpu,
      memory: slot.memoryMib,
      tags: tagsFor(slot.machineId),
      description: buildDescription(slot.machineId, slot.operationId),
    };
    const matches = (c: VmConfig) =>
      Number(c.cores) === want.cores &&
      Number(String(c.memory ?? "").replace(/^current=/, "")) === want.memory &&
      [MANAGED_TAG, machineTag(slot.machineId)].every((t) => parseTags(c.tags).includes(t)) &&
      parseMarker(c.description)?.machineId === slot.machineId;
    if (matches(loc.config)) return;
    for (let attempt = 1;; attempt++) {
      try {
        await api.put(`${vmPath(loc.node, loc.vmid)}/config`, want, signal);
        return;
      } catch (err) {
        if (!isTransient(err) || attempt >= timing.actionAttempts || signal.aborted) throw err;
        // The PUT may have landed behind the proxy error: look before repeating it.
        const now = await readConfig(api, loc.node, loc.vmid, signal);
        if (now !== null && matches(now)) return;
        await sleep(timing.settleMs, signal);
      }
    }
  }

  /** Clone the template into a fresh VMID, retrying lost races. */
  async function cloneNew(slot: SlotSpec, signal: AbortSignal): Promise<Located> {
    const srcNode = await locateTemplate(slot.templateVmid, signal);
    const body = {
      newid: 0,
      name: vmName(slot.machineId),
      // Name and marker go in the clone itself so an in-flight clone is recognisable.
      description: buildDescription(slot.machineId, slot.operationId),
      full: 1,
      target: slot.zone !== srcNode ? slot.zone : undefined,
      pool: px!.pool !== "" ? px!.pool : undefined,
    };
    for (let attempt = 1;; attempt++) {
      const started = await cloneMutex.run(async () => {
        const vmid = await allocateVmid(signal);
        reserved.add(vmid);
        cloning.set(vmid, slot.machineId);
        try {
          const upid = await api.post(
            `${vmPath(srcNode, slot.templateVmid)}/clone`,
            { ...body, newid: vmid },
            signal,
          );
          return { vmid, upid, error: null as unknown };
        } catch (error) {
          return { vmid, upid: null as unknown, error };
        }
      });
      const { vmid } = started;
      try {
        if (started.error !== null) throw started.error;
        log.info("cloning template {template} into VM {vmid} on {node}", {
          template: slot.templateVmid,
          vmid,
          node: slot.zone,
          machineId: slot.machineId,
        });
        await waitTask(
          api,
          started.upid,
          `clone of template ${slot.templateVmid} into VM ${vmid}`,
          timing.task,
          signal,
        );
        const config = await readConfig(api, slot.zone, vmid, signal);
        if (config === null) {
          throw new BackendError(`VM ${vmid} not found on ${slot.zone} after its clone finished`);
        }
        return { node: slot.zone, vmid, config };
      } catch (err) {
        if (signal.aborted) throw err;
        const text = serverTextOf(err);
        const refused = started.error !== null;
        if (
          (RACE_RE.test(text) || (refused && await legacyRaceLost(err, srcNode, vmid, signal))) &&
          attempt < timing.raceAttempts
        ) {
          log.warn("lost a VMID race for {vmid}; retrying with a new id", { vmid, error: text });
          lostRace.set(vmid, Date.now() + 60_000);
          continue;
        }
        if (started.error !== null && isTransient(err) && attempt < timing.raceAttempts) {
          // The clone may have started behind the proxy error: look for it before cloning again.
          log.warn("clone POST for VM {vmid} failed ambiguously; looking for it", {
            vmid,
            error: (err as Error).message,
          });
          const found = await settleAmbiguousClone(slot, srcNode, vmid, signal);
          if (found !== null) return found;
          continue;
        }
        throw err;
      } finally {
        reserved.delete(vmid);
        cloning.delete(vmid);
      }
    }
  }

  /**
   * A legacy server (no JSON `message`, reason phrase unreadable over fetch)
   * answers a synchronous newid collision with a bare 500. Decide it by
   * evidence: our POST was refused, so if the newid exists now, it is someone else's.
   */
  async function legacyRaceLost(
    err: unknown,
    srcNode: string,
    vmid: number,
    signal: AbortSignal,
  ): Promise<boolean> {
    if (!(err instanceof ProxmoxApiError) || err.status !== 500 || err.serverText !== "") {
      return false;
    }
    try {
      return (await readConfig(api, srcNode, vmid, signal)) !== null;
    } catch {
      return false;
    }
  }

  async function settleAmbiguousClone(
    slot: SlotSpec,
    srcNode: string,
    vmid: number,
    signal: AbortSignal,
  ): Promise<Located | null> {
    const deadline = Date.now() + timing.cloneSettleMs;
    while (Date.now() < deadline) {
      for (const node of new Set([srcNode, slot.zone])) {
        let exists = false;
        try {
          exists = (await readConfig(api, node, vmid, signal)) !== null;
        } catch (err) {
          if (signal.aborted) throw err;
        }
        if (exists) return await resolveCandidate(node, vmid, slot.machineId, signal);
      }
      await sleep(timing.settleMs, signal);
    }
    return null;
  }

  async function cloneOrAdopt(slot: SlotSpec, signal: AbortSignal): Promise<Located> {
    if (!nodes.includes(slot.zone)) {
      throw new BackendError(`zone ${slot.zone} is not one of the configured nodes`);
    }
    const existing = await findExisting(slot.machineId, signal);
    let loc: Located;
    if (existing !== null) {
      log.info("adopting VM {vmid} on {node} already made for machine {machineId}", {
        vmid: existing.vmid,
        node: existing.node,
        machineId: slot.machineId,
      });
      loc = existing;
    } else {
      loc = await cloneNew(slot, signal);
    }
    await applySizing(loc, slot, signal);
    return loc;
  }

  /** Start a stopped VM and wait for its guest agent. */
  async function ensureRunning(
    node: string,
    vmid: number,
    signal: AbortSignal,
  ): Promise<void> {
    const config = await waitUnlocked(api, node, vmid, vmTiming, signal);
    if (config === null) throw new BackendError(`VM ${vmid} does not exist on node ${node}`);
    if (!agentEnabled(config.agent)) {
      throw new BackendError(`VM ${vmid} does not enable the QEMU guest agent (config 'agent')`);
    }
    const st = await readStatus(api, node, vmid, signal);
    if (st === null) throw new BackendError(`VM ${vmid} does not exist on node ${node}`);
    if (st.status !== "running") {
      log.info("starting VM {vmid} on {node}", { vmid, node, status: st.status });
      await startVm(api, node, vmid, vmTiming, signal);
    }
    const polls = await waitForAgent(
      api,
      node,
      vmid,
      { pollMs: timing.agentPollMs, timeoutMs: timing.agentTimeoutMs },
      signal,
    );
    log.debug("guest agent of VM {vmid} answered after {polls} polls", { vmid, node, polls });
  }

  /** The VM behind a host ref, if it is still the one made for this machine. */
  async function locateOwned(machine: HostedMachine, signal: AbortSignal): Promise<Located> {
    const ref = parseHostRef(machine.hostRef);
    if (ref === null) {
      throw new BackendError(`malformed host ref ${JSON.stringify(machine.hostRef)}`);
    }
    let node = ref.node;
    let config = await waitUnlocked(api, node, ref.vmid, vmTiming, signal);
    if (config === null) {
      const moved = await relocate(ref.vmid, node, signal);
      if (moved !== null) {
        node = moved;
        config = await waitUnlocked(api, node, ref.vmid, vmTiming, signal);
      }
    }
    if (config === null) {
      throw new BackendError(`VM ${ref.vmid} of machine ${machine.machineId} no longer exists`);
    }
    if (ownedBy(config, machine.machineId) !== "ours") {
      // Never hand a bootstrap (a cluster join secret) to a VM someone else owns now.
      throw new BackendError(
        `VM ${ref.vmid} on ${node} is not the VM made for machine ${machine.machineId}; refusing to touch it`,
      );
    }
    return { node, vmid: ref.vmid, config };
  }

  async function create(slot: SlotSpec, signal: AbortSignal): Promise<{ hostRef: string }> {
    let pending = creating.get(slot.machineId);
    if (pending === undefined) {
      pending = observed("CloneVM", () => cloneOrAdopt(slot, signal));
      creating.set(slot.machineId, pending);
      pending.then(
        () => creating.delete(slot.machineId),
        () => creating.delete(slot.machineId),
      );
    }
    const loc = await pending;
    await observed("EnsureRunning", () => ensureRunning(loc.node, loc.vmid, signal));
    log.info("VM {vmid} on {node} is up for machine {machineId}", {
      vmid: loc.vmid,
      node: loc.node,
      machineId: slot.machineId,
    });
    return { hostRef: hostRefOf(loc.node, loc.vmid) };
  }

  async function configure(
    machine: HostedMachine,
    spec: ConfigureSpec,
    signal: AbortSignal,
  ): Promise<void> {
    const loc = await locateOwned(machine, signal);
    await observed("EnsureRunning", () => ensureRunning(loc.node, loc.vmid, signal));
    await observed("Configure", async () => {
      const path = cfg.bootstrapPath;
      const { parts } = await writeGuestFile(
        api,
        loc.node,
        loc.vmid,
        path,
        spec.bootstrap,
        timing.exec,
        signal,
      );
      log.info("bootstrap delivered to VM {vmid} ({bytes} bytes in {parts} writes); running hook", {
        vmid: loc.vmid,
        node: loc.node,
        machineId: machine.machineId,
        bytes: spec.bootstrap.length,
        parts,
      });
      const argv = [...cfg.bootstrapExec, path];
      let res;
      try {
        res = await runCommand(api, loc.node, loc.vmid, argv, timing.exec, signal);
      } catch (err) {
        if (isTransient(err)) {
          // exec is not idempotent: a second hook run could join the node twice.
          throw new BackendError(
            `bootstrap hook in VM ${loc.vmid}: lost track of the exec (${
              (err as Error).message
            }); not re-running it`,
          );
        }
        throw err;
      }
      if (res.exitCode !== 0) {
        const stderr = tail(res.stderr);
        throw new BackendError(
          `bootstrap hook ${argv[0]} in VM ${loc.vmid} failed (${describeExit(res)})${
            stderr ? `: ${stderr}` : ""
          }`,
        );
      }
    });
  }

  async function drain(
    machine: HostedMachine,
    graceSeconds: bigint,
    signal: AbortSignal,
  ): Promise<void> {
    const loc = await locateOwned(machine, signal);
    await observed("EnsureRunning", () => ensureRunning(loc.node, loc.vmid, signal));
    await observed("Drain", async () => {
      // Negative grace: kubectl's own default (-1 = each pod's terminationGracePeriodSeconds).
      const grace = graceSeconds < 0n
        ? -1
        : Number(graceSeconds > 86_400n ? 86_400n : graceSeconds);
      // Bounded below the kit's 15 minute Drain timeout.
      const timeout = Math.min(840, Math.max(600, grace + 120));
      const cmd = `kubectl drain "$(hostname)" --ignore-daemonsets --delete-emptydir-data` +
        ` --grace-period=${grace} --timeout=${timeout}s`;
      for (let attempt = 1;; attempt++) {
        try {
          const res = await runCommand(
            api,
            loc.node,
            loc.vmid,
            ["/bin/sh", "-c", cmd],
            timing.exec,
            signal,
          );
          if (res.exitCode !== 0) {
            const stderr = tail(res.stderr);
            throw new BackendError(
              `kubectl drain in VM ${loc.vmid} failed (${describeExit(res)})${
                stderr ? `: ${stderr}` : ""
              }`,
            );
          }
          log.info("drained VM {vmid}", { vmid: loc.vmid, node: loc.node, grace });
          return;
        } catch (err) {
          // A drain is safe to repeat, unlike the bootstrap hook.
          if (!isTransient(err) || attempt >= timing.actionAttempts || signal.aborted) throw err;
          await sleep(timing.settleMs, signal);
        }
      }
    });
  }

  async function deleteVm(machine: HostedMachine, signal: AbortSignal): Promise<void> {
    const ref = parseHostRef(machine.hostRef);
    if (ref === null) {
      throw new BackendError(`malformed host ref ${JSON.stringify(machine.hostRef)}`);
    }
    const { vmid } = ref;
    let node = ref.node;
    const fields = { vmid, node, machineId: machine.machineId };

    // Decide "gone" by reading the VM itself: the listing hides VMs without VM.Audit.
    let config: VmConfig | null | "unreadable";
    try {
      config = await waitUnlocked(api, node, vmid, vmTiming, signal);
    } catch (err) {
      if (!isPermissionError(err)) throw err;
      config = "unreadable";
    }
    if (config === null) {
      const moved = await relocate(vmid, node, signal);
      if (moved !== null) {
        node = moved;
        config = await waitUnlocked(api, node, vmid, vmTiming, signal);
      }
    }
    if (config === null) {
      log.info("VM {vmid} is already gone", fields);
      return;
    }
    if (config === "unreadable") {
      // The VMID may have been reused since our Create: a VM whose marker we
      // cannot read is never destroyed. The operator grants VM.Audit and retries.
      throw new BackendError(
        `cannot read VM ${vmid} on ${node} to verify it carries this machine's marker ` +
          `(permission denied; grant VM.Audit on the pool): refusing to destroy it`,
      );
    }
    if (ownedBy(config, machine.machineId) !== "ours") {
      // The VMID now belongs to something else: our VM is gone, theirs is not ours to touch.
      log.warn(
        "VM {vmid} no longer carries machine {machineId}'s marker; treating as gone",
        fields,
      );
      return;
    }
    const st = await readStatus(api, node, vmid, signal);
    if (st !== null && st.status !== "stopped") await stopVm(api, node, vmid, vmTiming, signal);
    await destroyVm(api, node, vmid, vmTiming, signal);
    if ((await readConfig(api, node, vmid, signal)) !== null) {
      throw new BackendError(`VM ${vmid} still exists on ${node} after its destroy task`);
    }
    log.info("destroyed VM {vmid}", fields);
  }

  async function describe(signal: AbortSignal): Promise<ManagedVm[]> {
    const entries = (await listResources(api, signal)).filter((e) => {
      if (e.template === 1) return false;
      const tags = parseTags(e.tags);
      return tags.includes(MANAGED_TAG) || e.lock === "clone" || cloning.has(e.vmid) ||
        (e.name ?? "").startsWith("bigfleet-");
    });
    const vms = await mapLimit(entries, 8, async (e): Promise<ManagedVm | null> => {
      let config: VmConfig | null;
      try {
        config = await readConfig(api, e.node, e.vmid, signal);
      } catch (err) {
        if (signal.aborted || !isPermissionError(err)) throw err;
        config = {};
      }
      if (config === null || Number(config.template ?? 0) === 1) return null;
      const marker = parseMarker(config.description);
      const tagged = parseTags(config.tags ?? e.tags).includes(MANAGED_TAG);
      const inflight = cloning.get(e.vmid);
      // Unmarked, untagged VMs (a human's clone in flight) are not ours to report.
      if (marker === null && !tagged && inflight === undefined) return null;
      const status = e.status === "running" || e.status === "stopped" ? e.status : "unknown";
      return {
        machineId: marker?.machineId ?? inflight ?? "",
        hostRef: hostRefOf(e.node, e.vmid),
        node: e.node,
        vmid: e.vmid,
        status,
        cloning: config.lock === "clone" || e.lock === "clone",
      };
    });
    return vms.filter((v): v is ManagedVm => v !== null);
  }

  return {
    kind: "proxmox",
    zones: nodes,
    create,
    configure,
    drain,
    delete: (machine, signal) => observed("DeleteVM", () => deleteVm(machine, signal)),
    describe: (signal) => observed("DescribeManaged", () => describe(signal)),
    close() {
      api.close();
      return Promise.resolve();
    },
  };
}

export { TransportError };
