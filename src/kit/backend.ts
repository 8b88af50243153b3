// The substrate seam. A Backend only knows how to make, bootstrap, drain and
// destroy VMs and how to describe the ones it manages. Everything about the
// BigFleet contract (fencing, idempotency, states, timeouts, persistence)
// lives in the kit; the kit calls these methods from background tasks and
// aborts `signal` when a transition times out.

/** What the backend needs to know about a slot to create its VM. */
export interface SlotSpec {
  /** The BigFleet machine id, verbatim. */
  machineId: string;
  /** The kit's operation id for this Create (recorded on the VM for adoption). */
  operationId: string;
  /** Catalog name; a backend maps (instance type, zone) to its source (e.g. a template) itself. */
  instanceType: string;
  /** The BigFleet zone, which is a Proxmox node name on the real backend. */
  zone: string;
  vcpu: number;
  memoryMib: number;
}

/** A machine that already has a VM. `hostRef` is `<node>/<vmid>`. */
export interface HostedMachine {
  machineId: string;
  hostRef: string;
}

export interface ConfigureSpec {
  clusterId: string;
  /** Secret: never log, persist or echo it. */
  bootstrap: Uint8Array;
}

/** One VM this provider manages, as the substrate reports it. */
export interface ManagedVm {
  /** Machine id read from the VM's marker; "" when the marker is missing. */
  machineId: string;
  hostRef: string;
  node: string;
  vmid: number;
  status: "running" | "stopped" | "unknown";
  /** True while a clone into this VM is still in flight. */
  cloning: boolean;
}

export interface Backend {
  /** "fake" or "proxmox"; used in logs and the startup line. */
  readonly kind: "fake" | "proxmox";
  /** Zones (node names) this backend can place VMs in. */
  readonly zones: readonly string[];
  /** Clone, size, tag and start a VM for the slot; resolve once its guest agent answers. Idempotent on machineId. */
  create(slot: SlotSpec, signal: AbortSignal): Promise<{ hostRef: string }>;
  /** Deliver the bootstrap and run the hook; resolve only after the hook exited 0. */
  configure(machine: HostedMachine, spec: ConfigureSpec, signal: AbortSignal): Promise<void>;
  /** Drain the node out of its cluster, bounded by the grace period. */
  drain(machine: HostedMachine, graceSeconds: bigint, signal: AbortSignal): Promise<void>;
  /** Stop and destroy the VM with its disks; resolve when it is really gone (already gone is success). */
  delete(machine: HostedMachine, signal: AbortSignal): Promise<void>;
  /** Every VM this provider manages. Used to rebuild inventory and to reconcile. */
  describe(signal: AbortSignal): Promise<ManagedVm[]>;
  /** Release sockets and timers. */
  close(): Promise<void>;
}

/** Thrown by a backend for a failure the operator must see verbatim in last_error. Never carries secrets. */
export class BackendError extends Error {
  override name = "BackendError";
}
