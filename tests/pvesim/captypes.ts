// Public types of the node-capacity, NIC and guest-capability models
// (capacity.ts, nic.ts, guestcaps.ts), re-exported from mod.ts.

/** One node's hardware and what runs on it besides the guests (SimOptions.nodeResources). */
export interface SimNodeResources {
  /**
   * Physical memory in MiB, as `memory.total` reports it. Default 524288 (512 GiB, a
   * two-socket server: room for the provider's built-in offerings).
   */
  memoryMib?: number;
  /** Logical CPUs (`cpuinfo.cpus`, resources `maxcpu`). Default 64. */
  cpus?: number;
  /** Swap in MiB. Default 0 (a PVE install on ZFS or a tuned host has none). */
  swapMib?: number;
  /** Memory the host itself uses (pveproxy, ZFS ARC, ...) in MiB. Default 2048. */
  hostUsedMib?: number;
  /** CPU load of the host itself, a fraction of all CPUs. Default 0.03. */
  hostCpu?: number;
  /** Bridges (and SDN vnets) of the node → MTU. Default: SimOptions.bridges. */
  bridges?: Record<string, number>;
}

/** What the guest OS inside a template (and every clone of it) lets the agent do. */
export interface SimGuest {
  /**
   * QGA commands disabled by qemu-ga's block/allow list, e.g. RHEL/Rocky 10's
   * `["guest-exec", "guest-exec-status", "guest-file-open", "guest-file-write", ...]`.
   */
  blockedRpcs?: string[];
  /** The guest has no `/bin/sh` (nor bash): guest-exec of a shell cannot spawn it. */
  noShell?: boolean;
  /**
   * qemu-ga version (`GET …/agent/info`); below 9.1 its spawn errors carry the
   * `Guest agent command failed, error was '…'` wrapper. Default "7.2.0" (Debian 12).
   */
  qgaVersion?: string;
}
