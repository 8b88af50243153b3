// The cluster's state: nodes, guests (qemu + lxc), pools, the pvestatd RRD
// view that cluster/resources lags behind, and guest-side files/execs.

import { createHash } from "node:crypto";
import { lockedError, noConfig } from "./errors.ts";
import { LockTable } from "./locks.ts";
import { normaliseTags } from "./params.ts";
import { withPending } from "./pending.ts";
import { type StorageRecord, storageRecord } from "./storage.ts";
import type { SimGuest } from "./captypes.ts";
import type {
  SimExec,
  SimFileWrite,
  SimLxc,
  SimStorage,
  SimTemplate,
  SimTiming,
  SimVm,
} from "./types.ts";

export type ConfigValue = string | number;

/**
 * A moment's view of pvestatd's points: those published up to `upTo` that are
 * old enough to be visible at `at`. A pveproxy worker's status dump is one
 * (statuscache.ts); ordering by publication, not only by the millisecond,
 * keeps a change made in the dump's own millisecond out of it.
 */
export interface StatusView {
  at: number;
  upTo: number;
}

/** One pvestatd publication: what cluster/resources shows from `at` on. */
interface RrdPoint {
  at: number;
  /** Publication order: two points of one millisecond are still ordered. */
  seq: number;
  name: string;
  status: "running" | "stopped";
  template: number;
}

export interface ExecRecord extends SimExec {
  stdoutBytes: Uint8Array;
  stderrBytes: Uint8Array;
}

export interface VmRecord {
  vmid: number;
  node: string;
  config: Record<string, ConfigValue>;
  /** The config's [PENDING] section (pending.ts): changes not applied yet. */
  pending: Record<string, ConfigValue>;
  pendingDelete: Set<string>;
  status: "running" | "stopped";
  startedAt: number;
  qemuPid: number;
  pool?: string;
  foreign: boolean;
  rrd: RrdPoint[];
  files: Map<string, Uint8Array>;
  dirs: Set<string>;
  fileWrites: SimFileWrite[];
  execs: Map<number, ExecRecord>;
  nextExecPid: number;
  bootstrapRuns: SimVm["bootstrapRuns"];
  drains: SimVm["drains"];
  /** When the node the bootstrap joined turns Ready (ms; undefined until a bootstrap exited 0). */
  joinedAt?: number;
  readyChecks: SimVm["readyChecks"];
  starts: number;
  stops: number;
  /** The guest OS's agent restrictions (guestcaps.ts), copied to clones. */
  guest?: SimGuest;
  /** Its HA resource's requested state (ha-manager), when HA manages it. */
  hastate?: string;
}

export interface LxcRecord {
  vmid: number;
  node: string;
  name: string;
  status: "running" | "stopped";
}

const GUEST_DIRS = [
  "/",
  "/run",
  "/tmp",
  "/etc",
  "/root",
  "/home",
  "/opt",
  "/usr",
  "/usr/local",
  "/usr/local/bin",
  "/var",
  "/var/lib",
  "/var/tmp",
  "/var/log",
];

function randomMac(): string {
  const b = crypto.getRandomValues(new Uint8Array(3));
  return ["BC", "24", "11", ...Array.from(b, (x) => x.toString(16).padStart(2, "0").toUpperCase())]
    .join(":");
}

export function freshIdentity(): Record<string, string> {
  return {
    smbios1: `uuid=${crypto.randomUUID()}`,
    vmgenid: crypto.randomUUID(),
  };
}

export function newVmRecord(vmid: number, node: string, config: Record<string, ConfigValue>) {
  const vm: VmRecord = {
    vmid,
    node,
    config,
    pending: {},
    pendingDelete: new Set(),
    status: "stopped",
    startedAt: 0,
    qemuPid: 0,
    foreign: false,
    rrd: [],
    files: new Map(),
    dirs: new Set(GUEST_DIRS),
    fileWrites: [],
    execs: new Map(),
    nextExecPid: 1000 + (vmid % 1000),
    bootstrapRuns: [],
    drains: [],
    readyChecks: [],
    starts: 0,
    stops: 0,
  };
  return vm;
}

/** A seeded guest's config; its disk goes on `diskStorage`. */
export function templateConfig(
  t: SimTemplate,
  diskStorage = "local-lvm",
): Record<string, ConfigValue> {
  const c: Record<string, ConfigValue> = {
    name: t.name,
    cores: t.cores ?? 2,
    sockets: 1,
    memory: String(t.memory ?? 2048),
    ostype: "l26",
    scsihw: "virtio-scsi-single",
    boot: "order=scsi0;net0",
    net0: `virtio=${randomMac()},bridge=vmbr0`,
    ...freshIdentity(),
  };
  const isTemplate = t.template ?? true;
  c.scsi0 = isTemplate
    ? `${diskStorage}:base-${t.vmid}-disk-0,size=20G`
    : `${diskStorage}:vm-${t.vmid}-disk-0,size=20G`;
  if (t.agent !== null) c.agent = t.agent ?? "1";
  if (t.tags !== undefined && t.tags !== "") c.tags = normaliseTags(t.tags);
  if (t.description !== undefined && t.description !== "") c.description = t.description;
  if (t.balloon !== undefined) c.balloon = t.balloon;
  if (isTemplate) c.template = 1;
  Object.assign(c, t.config);
  return c;
}

/** qemu-server: vCPUs = sockets × cores, or `vcpus` when set. */
export function effectiveVcpus(c: Record<string, ConfigValue>): number {
  const max = Number(c.sockets ?? 1) * Number(c.cores ?? 1);
  return c.vcpus !== undefined ? Number(c.vcpus) : max;
}

/**
 * agent property string → enabled? (`1`, `enabled=on,fstrim_cloned_disks=1`,
 * `0`): `enabled=` is a JSONSchema boolean, which parse_property_string reads
 * with parse_boolean (1|on|yes|true, any case); the bare default-key value is
 * type-checked as it is, so only 1 or 0 (seen on PVE 8.4: `agent: on` is
 * refused by the API and dropped from a hand-edited config).
 */
export function agentEnabled(v: ConfigValue | undefined): boolean {
  return agentValid(v) && agentOn(v);
}

function agentOn(v: ConfigValue | undefined): boolean {
  for (const part of String(v ?? "").split(",")) {
    if (!part.includes("=")) return part === "1";
    const [k, val] = part.split("=", 2);
    if (k === "enabled") return /^(1|on|yes|true)$/i.test(val);
  }
  return false;
}

/** Whether PVE parses this `agent` value at all (else the config reads as having none). */
export function agentValid(v: ConfigValue | undefined): boolean {
  if (v === undefined) return false;
  for (const part of String(v).split(",")) {
    if (!part.includes("=")) {
      if (part !== "1" && part !== "0") return false;
      continue;
    }
    const [k, val] = part.split("=", 2);
    if (k === "enabled" && !/^(1|0|on|off|yes|no|true|false)$/i.test(val)) return false;
  }
  return true;
}

/** The usage counters status/current and cluster/resources report (static in the sim). */
export function usageStats(vm: VmRecord, running: boolean): Record<string, number> {
  const maxmem = Number(String(vm.config.memory ?? "512").replace(/^current=/, "")) * 1048576;
  return {
    uptime: running ? Math.max(0, Math.floor((Date.now() - vm.startedAt) / 1000)) : 0,
    cpu: running ? 0.012 : 0,
    maxmem,
    mem: running ? Math.floor(maxmem / 4) : 0,
    maxdisk: 21474836480,
    disk: 0,
    netin: 0,
    netout: 0,
    diskread: 0,
    diskwrite: 0,
  };
}

export class ClusterState {
  readonly vms = new Map<number, VmRecord>();
  readonly lxc = new Map<number, LxcRecord>();
  readonly pools: Set<string>;
  /** flocks (node-local) and pmxcfs locks held now (locks.ts). */
  readonly locks = new LockTable();
  /** storage.cfg by storage id. */
  readonly storages = new Map<string, StorageRecord>();
  /** Volumes a destroy left behind (destroy.ts): volid → where and whose. */
  readonly leftovers = new Map<string, { node: string; storage: string; vmid: number }>();

  constructor(
    readonly nodes: string[],
    pools: string[],
    readonly timing: SimTiming,
  ) {
    this.pools = new Set(pools);
  }

  addStorage(s: SimStorage): void {
    this.storages.set(s.id, storageRecord(s));
  }

  /** Where a seeded guest's disk goes when SimTemplate.storage does not say. */
  defaultDiskStorage(shared: boolean): string {
    const images = [...this.storages.values()].filter((s) => s.content.includes("images"));
    return images.find((s) => s.shared === shared)?.id ?? "local-lvm";
  }

  addTemplate(t: SimTemplate): VmRecord {
    const node = t.node ?? this.nodes[0];
    const storage = t.storage ?? this.defaultDiskStorage(t.sharedStorage ?? true);
    const vm = newVmRecord(t.vmid, node, templateConfig(t, storage));
    vm.foreign = true;
    vm.pool = t.pool;
    vm.guest = t.guest;
    vm.hastate = t.hastate;
    // Seeded guests have long been known to pvestatd.
    if (t.running && !(t.template ?? true)) {
      vm.status = "running";
      vm.startedAt = Date.now() - 3_600_000;
      vm.qemuPid = 4000 + t.vmid;
    }
    this.vms.set(t.vmid, vm);
    this.publish(vm, -Infinity);
    return vm;
  }

  addLxc(c: SimLxc): void {
    this.lxc.set(c.vmid, {
      vmid: c.vmid,
      node: c.node ?? this.nodes[this.nodes.length - 1],
      name: c.name,
      status: c.status ?? "running",
    });
  }

  isNode(n: string): boolean {
    return this.nodes.includes(n);
  }

  vmidTaken(vmid: number): boolean {
    return this.vms.has(vmid) || this.lxc.has(vmid);
  }

  /** The VM as seen through `nodes/{node}`: PVE reads that node's config dir only. */
  vmOn(node: string, vmid: number): VmRecord {
    const vm = this.vms.get(vmid);
    if (!vm || vm.node !== node) throw noConfig(node, vmid);
    return vm;
  }

  checkLock(vm: VmRecord): void {
    const lock = vm.config.lock;
    if (lock !== undefined) throw lockedError(String(lock));
  }

  /**
   * pvestatd's points by VMID (PVE keys them `qemu/<vmid>`): they outlive the
   * VM, so a new VM in a reused VMID is listed with the old one's name and
   * status until its own point is picked up.
   */
  readonly #rrdByVmid = new Map<number, RrdPoint[]>();
  #pointSeq = 0;

  /** What pvestatd's points show right now. */
  statusNow(): StatusView {
    return { at: Date.now(), upTo: this.#pointSeq };
  }

  /** Record a change pvestatd will pick up `resourcesLagMs` later. */
  publish(vm: VmRecord, at = Date.now()): void {
    const point = {
      at,
      seq: ++this.#pointSeq,
      name: vm.config.name !== undefined ? String(vm.config.name) : `VM ${vm.vmid}`,
      status: vm.status,
      template: vm.config.template ? 1 : 0,
    };
    const byVmid = this.#rrdByVmid.get(vm.vmid) ?? [];
    this.#rrdByVmid.set(vm.vmid, byVmid);
    for (const list of [vm.rrd, byVmid]) {
      list.push(point);
      if (list.length > 20) list.splice(0, list.length - 20);
    }
  }

  /** The newest RRD point of the VMID old enough to be visible now, or undefined. */
  rrdView(vm: VmRecord, view = this.statusNow()): RrdPoint | undefined {
    const horizon = view.at - this.timing.resourcesLagMs;
    let best: RrdPoint | undefined;
    for (const p of this.#rrdByVmid.get(vm.vmid) ?? vm.rrd) {
      if (p.at <= horizon && p.seq <= view.upTo) best = p;
    }
    return best;
  }

  setRunning(vm: VmRecord, running: boolean): void {
    if (running) {
      vm.status = "running";
      vm.startedAt = Date.now();
      vm.qemuPid = 10000 + Math.floor(Math.random() * 50000);
      vm.starts++;
    } else {
      vm.status = "stopped";
      vm.qemuPid = 0;
      vm.stops++;
      // Processes die with the guest; /run is a tmpfs.
      for (const e of vm.execs.values()) {
        if (e.doneAt > Date.now()) {
          e.doneAt = Date.now();
          e.exitcode = undefined;
          e.signal = 9;
        }
      }
      for (const p of [...vm.files.keys()]) if (p.startsWith("/run/")) vm.files.delete(p);
    }
    this.publish(vm);
  }

  digest(vm: VmRecord): string {
    const lines = (c: Record<string, ConfigValue>) =>
      Object.keys(c).sort().map((k) => `${k}: ${c[k]}`).join("\n");
    const pending = lines(vm.pending) + [...vm.pendingDelete].sort().join(",");
    const text = lines(vm.config) + (pending === "" ? "" : `\n[PENDING]\n${pending}`);
    return createHash("sha1").update(text).digest("hex");
  }

  /**
   * GET config view: pending changes applied unless `current`, description
   * trimmed at the end, digest added.
   */
  configView(vm: VmRecord, current = false): Record<string, ConfigValue> {
    const out: Record<string, ConfigValue> = {};
    for (const [k, v] of Object.entries(current ? vm.config : withPending(vm))) {
      out[k] = k === "description" ? String(v).replace(/\s+$/, "") : v;
    }
    out.digest = this.digest(vm);
    return out;
  }

  snapshot(vm: VmRecord): SimVm {
    const c = vm.config;
    const opt = (k: string) => (c[k] !== undefined ? String(c[k]) : undefined);
    return {
      vmid: vm.vmid,
      node: vm.node,
      status: vm.status,
      template: !!c.template,
      name: opt("name"),
      tags: opt("tags"),
      lock: opt("lock"),
      description: opt("description"),
      pool: vm.pool,
      foreign: vm.foreign,
      config: { ...c },
      pending: { ...vm.pending },
      files: Object.fromEntries([...vm.files].map(([k, v]) => [k, v.slice()])),
      fileWrites: vm.fileWrites.map((w) => ({ ...w })),
      execs: [...vm.execs.values()].map((e) => {
        const { stdoutBytes: _o, stderrBytes: _e, ...rest } = e;
        return { ...rest, command: [...e.command] };
      }),
      bootstrapRuns: vm.bootstrapRuns.map((r) => ({ ...r })),
      drains: vm.drains.map((d) => ({ ...d })),
      readyChecks: vm.readyChecks.map((c) => ({ ...c })),
      starts: vm.starts,
      stops: vm.stops,
    };
  }
}
