// The substrate seam. A Backend makes, bootstraps, drains and destroys hosts
// and describes the ones it manages; it is told only BigFleet facts (machine
// id, operation id, instance type, zone) and resolves everything
// substrate-specific (sizing, template, placement) itself. Where a machine
// lives is a host ref the backend mints on create: the kit stores it, shows it
// and hands it back, never reads it. Everything about the BigFleet contract
// (fencing, idempotency, states, timeouts, persistence) lives in the kit; the
// kit calls these methods from background tasks and aborts `signal` when a
// transition times out. docs/design.md#adding-a-backend says how to add one.

/** What the backend is told about a slot to create its host. */
export interface SlotSpec {
  /** The BigFleet machine id, verbatim. */
  machineId: string;
  /** The kit's operation id for this Create (a backend may record it on the host for adoption). */
  operationId: string;
  /** The slot's instance type; the backend maps it (and the zone) to sizing and source itself. */
  instanceType: string;
  /** The slot's zone. */
  zone: string;
}

/** A machine that already has a host: the host ref its create returned. */
export interface HostedMachine {
  machineId: string;
  hostRef: string;
}

export interface ConfigureSpec {
  clusterId: string;
  /** Secret: never log, persist or echo it. */
  bootstrap: Uint8Array;
}

/** One host this provider manages, as the substrate reports it. */
export interface ManagedVm {
  /** The machine id recorded on the host; "" when it carries none. */
  machineId: string;
  hostRef: string;
  /** The zone it is in now. */
  zone: string;
  /** The instance type to list it under when no slot claims it (an orphan). */
  instanceType: string;
  /** True while its create is still in flight (it may be a retried Create's). */
  cloning: boolean;
}

/** A machine whose host the operator asked about: its slot's facts and the host ref on record (maybe ""). */
export interface InspectedMachine extends HostedMachine {
  instanceType: string;
  zone: string;
}

/** The host a machine has on the substrate now, as `inspect` found it. */
export interface HostInspection {
  hostRef: string;
  /** One line for the operator, e.g. `VM 123 on pve1: running, 2 vCPU / 4096 MiB, agent answers`. */
  summary: string;
  /**
   * Why it is not usable as the slot's IDLE machine right now (not running,
   * agent silent, sized for another type, still locked); empty when it is.
   */
  problems: string[];
}

/** A Create about to start, as admission sees it: BigFleet facts only. */
export type AdmitSpec = Omit<SlotSpec, "operationId">;

/** Room in one zone as a backend counts it under its own policy (metrics, `machines room`). */
export interface ZoneRoom {
  zone: string;
  /** "" when the room is known, else why it is not (the zone's host is down, ...). */
  problem: string;
  memoryMib: { capacity: number; held: number; free: number };
  /** capacity and free are null when the backend puts no bound on the sum. */
  vcpus: { capacity: number | null; held: number; free: number | null };
  /** Per instance type offered in the zone: how many more fit now. */
  fits: Record<string, number>;
}

export interface Backend {
  /** A label for logs and the startup line ("fake", "proxmox"). */
  readonly kind: string;
  /** Make (or adopt) the slot's host and start it; resolve once it is usable. Idempotent on machineId. */
  create(slot: SlotSpec, signal: AbortSignal): Promise<{ hostRef: string }>;
  /** Deliver the bootstrap and run the hook; resolve only after the hook exited 0. */
  configure(machine: HostedMachine, spec: ConfigureSpec, signal: AbortSignal): Promise<void>;
  /** Drain the machine's Kubernetes node out of its cluster, bounded by the grace period. */
  drain(machine: HostedMachine, graceSeconds: bigint, signal: AbortSignal): Promise<void>;
  /** Destroy the host; resolve when it is really gone (already gone is success). */
  delete(machine: HostedMachine, signal: AbortSignal): Promise<void>;
  /** Every host this provider manages. Used to rebuild inventory and to reconcile. */
  describe(signal: AbortSignal): Promise<ManagedVm[]>;
  /**
   * The machine's host, found by what the backend recorded on it (the host
   * ref on record first, if it is still the machine's), or null when there is
   * none. Only reads: the operator's `machines recover` decides on it.
   */
  inspect(machine: InspectedMachine, signal: AbortSignal): Promise<HostInspection | null>;
  /** Release sockets and timers. */
  close(): Promise<void>;
  /**
   * Optional admission of a Create, asked synchronously just before a legal
   * Create starts its transition (after the fence and the state checks): a
   * string refuses it (RESOURCE_EXHAUSTED with that message; the machine
   * stays SPECULATIVE), null admits it. A backend may hold what it admitted
   * (room on a host) until the create that follows ends.
   */
  admit?(slot: AdmitSpec): string | null;
  /** Optional: the room per zone, read at each metrics scrape and by `machines room`. */
  room?(): ZoneRoom[];
}

/** Thrown by a backend for a failure the operator must see verbatim in last_error. Never carries secrets. */
export class BackendError extends Error {
  override name = "BackendError";
}
