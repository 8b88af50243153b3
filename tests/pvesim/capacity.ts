// What each node has and what its guests hold, as pvestatd and the node's
// own status report them (docs/proxmox-notes.md "Node capacity"):
// physical memory, CPUs, swap and bridges per node (SimOptions.nodeResources),
// the host's own use (SimNodeResources.hostUsedMib / hostCpu, sim.setNodeLoad),
// and every running guest's configured memory, counted whole: QEMU maps all of
// a guest's RAM at start and a Linux guest soon fills it with page cache, so
// a capacity check must treat it as taken. Stopped guests hold nothing.
// `used` never passes `total` (the kernel swaps or kills first). GET
// /nodes/{n}/status counts guests live; /nodes and /cluster/resources count
// what pvestatd last saw (the RRD view, state.ts), so they lag like the rest.
// A guest's vCPU count is capped at the node's CPUs unless `vcpus` says
// otherwise (qemu-server vmstatus), its `maxdisk` is its boot disk's `size=`.

import type { SimNodeResources } from "./captypes.ts";
import { memoryValue } from "./params.ts";
import type { SimCore } from "./router.ts";
import type { ClusterState, ConfigValue, VmRecord } from "./state.ts";
import { driveFile, isCdrom, isDriveKey } from "./storage.ts";

const MIB = 1024 * 1024;

/** A node's resources with every default filled in. */
export interface NodeSpec {
  memoryMib: number;
  cpus: number;
  swapMib: number;
  hostUsedMib: number;
  hostCpu: number;
  bridges: Record<string, number>;
}

const specs = new WeakMap<ClusterState, Map<string, NodeSpec>>();

/** Records each node's resources (mod.ts, at start). */
export function configureNodes(
  state: ClusterState,
  perNode: Record<string, SimNodeResources> = {},
  bridges: Record<string, number> = { vmbr0: 1500 },
): void {
  const out = new Map<string, NodeSpec>();
  for (const n of state.nodes) {
    const r = perNode[n] ?? {};
    out.set(n, {
      memoryMib: r.memoryMib ?? 524288,
      cpus: r.cpus ?? 64,
      swapMib: r.swapMib ?? 0,
      hostUsedMib: r.hostUsedMib ?? 2048,
      hostCpu: r.hostCpu ?? 0.03,
      bridges: { ...(r.bridges ?? bridges) },
    });
  }
  specs.set(state, out);
}

export function nodeSpec(state: ClusterState, node: string): NodeSpec {
  const s = specs.get(state)?.get(node);
  if (!s) throw new Error(`pvesim: no resources for node ${node}`);
  return s;
}

/** sim.setNodeLoad: other software on the host takes this much from now on. */
export function setNodeLoad(
  state: ClusterState,
  node: string,
  load: { hostUsedMib?: number; hostCpu?: number },
): void {
  const s = nodeSpec(state, node);
  if (load.hostUsedMib !== undefined) s.hostUsedMib = load.hostUsedMib;
  if (load.hostCpu !== undefined) s.hostCpu = load.hostCpu;
}

/** The bridges a node has (its own, plus every SDN vnet) → MTU. */
export function nodeBridges(core: SimCore, node: string): Record<string, number> {
  const out = { ...nodeSpec(core.state, node).bridges };
  for (const vnet of Object.keys(core.faults.acl?.vnetZones ?? {})) out[vnet] ??= 1500;
  return out;
}

/** The guest's configured memory in MiB (`memory`, `[current=]N`; qemu-server's default 512). */
export function vmMemoryMib(config: Record<string, ConfigValue>): number {
  return memoryValue(String(config.memory ?? "512"));
}

/** vmstatus `cpus`: sockets × cores capped at the node's CPUs, or `vcpus` when set. */
export function vmCpus(cpus: number, config: Record<string, ConfigValue>): number {
  if (config.vcpus !== undefined) return Number(config.vcpus);
  return Math.min(cpus, Number(config.sockets ?? 1) * Number(config.cores ?? 1));
}

/** pve-common parse_size: `32G`, `512M`, `4K`, `1.5T`, bytes; null when unparsable. */
export function parseSize(v: string): number | null {
  const m = /^(\d+(?:\.\d+)?)([KMGT])?$/.exec(v);
  if (!m) return null;
  const unit = { K: 1024, M: MIB, G: 1024 * MIB, T: 1024 * 1024 * MIB }[m[2] ?? ""] ?? 1;
  return Math.floor(Number(m[1]) * unit);
}

/** pve-common format_size: the largest unit the byte count is a whole multiple of. */
export function formatSize(bytes: number): string {
  const units = ["", "K", "M", "G", "T"];
  let n = Math.floor(bytes);
  let i = 0;
  while (i < 4 && n > 0 && n % 1024 === 0) {
    n /= 1024;
    i++;
  }
  return `${n}${units[i]}`;
}

/** A drive value's `size=` in bytes (0 when it has none). */
export function driveBytes(value: ConfigValue): number {
  const m = /(?:^|,)size=([^,]+)/.exec(String(value));
  return m ? parseSize(m[1]) ?? 0 : 0;
}

/** qemu-server bootdisk_size: the first disk of `boot: order=` (else `bootdisk`, else the first disk), 0 for none. */
export function bootdiskBytes(config: Record<string, ConfigValue>): number {
  const order = /order=([^,]+)/.exec(String(config.boot ?? ""))?.[1].split(";") ?? [];
  const disks = Object.keys(config).filter((k) => isDriveKey(k)).sort();
  const key = [...order, String(config.bootdisk ?? ""), ...disks].find((k) =>
    isDriveKey(k) && config[k] !== undefined && !isCdrom(config[k]) &&
    driveFile(config[k]) !== "none"
  );
  return key === undefined ? 0 : driveBytes(config[key]);
}

/** The figures a running guest adds to its node. */
function guestLoad(spec: NodeSpec, vm: VmRecord): { bytes: number; cpu: number } {
  return { bytes: vmMemoryMib(vm.config) * MIB, cpu: vmCpus(spec.cpus, vm.config) * 0.012 };
}

/** Memory used and CPU load of a node; `seen` counts what pvestatd last saw running. */
export function nodeUsage(
  core: SimCore,
  node: string,
  seen: boolean,
): { total: number; used: number; cpu: number } {
  const spec = nodeSpec(core.state, node);
  const total = spec.memoryMib * MIB;
  let used = spec.hostUsedMib * MIB;
  let cpuThreads = spec.hostCpu * spec.cpus;
  for (const vm of core.state.vms.values()) {
    if (vm.node !== node) continue;
    const running = seen ? core.state.rrdView(vm)?.status === "running" : vm.status === "running";
    if (!running) continue;
    const load = guestLoad(spec, vm);
    used += load.bytes;
    cpuThreads += load.cpu;
  }
  return { total, used: Math.min(used, total), cpu: Math.min(1, cpuThreads / spec.cpus) };
}

/** GET /nodes/{node}/status: the live figures (Nodes.pm status: cpu, cpuinfo, memory, swap). */
export function nodeStatusFigures(core: SimCore, node: string): Record<string, unknown> {
  const spec = nodeSpec(core.state, node);
  const { total, used, cpu } = nodeUsage(core, node, false);
  return {
    cpu: Number(cpu.toFixed(4)),
    cpuinfo: {
      cpus: spec.cpus,
      cores: Math.max(1, Math.ceil(spec.cpus / 2)),
      sockets: 1,
      model: "AMD EPYC 7302P 16-Core Processor",
      mhz: "3000.000",
      hvm: "1",
      flags: "fpu vme",
      user_hz: 100,
    },
    memory: { total, used, free: total - used },
    swap: { total: spec.swapMib * MIB, used: 0, free: spec.swapMib * MIB },
  };
}

/** A node's figures in /nodes and /cluster/resources (pvestatd's last report). */
export function nodeResourceFigures(core: SimCore, node: string): Record<string, number> {
  const spec = nodeSpec(core.state, node);
  const { total, used, cpu } = nodeUsage(core, node, true);
  return { maxcpu: spec.cpus, cpu: Number(cpu.toFixed(4)), maxmem: total, mem: used };
}

/** A guest's vCPUs and boot disk size as vmstatus reports them (resources, status/current). */
export function vmFigures(core: SimCore, vm: VmRecord): { cpus: number; maxdisk: number } {
  const cpus = specs.get(core.state)?.get(vm.node)?.cpus ?? Infinity;
  return { cpus: vmCpus(cpus, vm.config), maxdisk: bootdiskBytes(vm.config) };
}
