// The validated, fully resolved configuration the rest of the program runs on.
// Produced only by loadConfig (src/config/load.ts); nothing downstream re-parses
// flags or files.

import type { Slot } from "../kit/model.ts";
import type { LogSettings } from "./logging.ts";
import type { Offering } from "./offerings.ts";
import type { RoomPolicy } from "./room.ts";

/** A listen address. host "" means every interface. */
export interface ListenAddr {
  host: string;
  port: number;
  /** As the operator wrote it, for logs. */
  raw: string;
}

/**
 * Where an instance type's VMs are cloned from. A clone placed on another
 * node than its template's needs every template volume on shared storage
 * (docs/configuration.md#templates-one-per-node-or-one-on-shared-storage).
 */
export type TemplateSource =
  /** One template for every zone: on shared storage, or every zone is its node. */
  | { kind: "vmid"; vmid: number }
  /** A template per zone (node), usually each on that node's local storage. */
  | { kind: "per-zone"; vmids: ReadonlyMap<string, number> }
  /** On each zone's node, the one template with this name. */
  | { kind: "name"; name: string };

export interface InstanceType {
  name: string;
  vcpu: number;
  memoryMib: number;
  /** Already resolved: a catalog entry without one takes --template-vmid / --template-name. */
  template: TemplateSource;
  /** `disk_gib`: the boot disk grown to this size after the clone (never shrunk). */
  diskGib?: number;
  /** `storage`: where a full clone's disks go; absent: the template's own storages. */
  storage?: StorageTarget;
  /** `clone`: absent means full. */
  clone?: "full" | "linked";
  /** `network`: the clone's first NIC (net0), its model and MAC kept. */
  network?: NicSettings;
}

/** A full clone's target storage: one for every zone, or one per zone (others: the template's). */
export type StorageTarget =
  | { kind: "one"; storage: string }
  | { kind: "per-zone"; storages: ReadonlyMap<string, string> };

/** Bridge, VLAN tag and MTU of a clone's net0; an absent tag or MTU is removed from it. */
export interface NicSettings {
  bridge: string;
  tag?: number;
  mtu?: number;
}

/** --proxmox-vmid-range: the VMIDs clones may take, `lower` inclusive, `upper` exclusive. */
export interface VmidRange {
  lower: number;
  upper: number;
}

/**
 * One speculative slot: `<provider>/OnDemand/<instance_type>/<zone>/<NNN>`,
 * described from its offering (resources, labels) and catalog entry
 * (allocatable: cpu = vCPU, memory = `NGi` or `NMi`). The shape is the kit's:
 * config produces it, the kit consumes it.
 */
export type { Slot };

export interface ProxmoxConfig {
  apiUrl: string;
  tokenId: string;
  /** Secret. Never log it. */
  tokenSecret: string;
  /** --proxmox-token-file, re-read when it changes (docs/credentials.md#rotating-the-token); null when inline. */
  tokenFile: string | null;
  /** PEM text of the CA bundle, when --proxmox-ca-file was given. */
  caPem: string | null;
  /** Upper-case colon-separated SHA-256 (AB:CD:...), when --proxmox-tls-fingerprint was given. */
  fingerprint: string | null;
  pool: string;
  nodes: string[];
  /** --proxmox-tags: the tags every VM gets; `@machine` stands for its per-machine tag. */
  tags: string[];
  /** Protected calls (those pvedaemon's workers run) in flight per node; 0: no limit. */
  callsPerNode: number;
  /** Clone tasks at once per node and storage (per storage when shared); 0: no limit. */
  clonesPerStorage: number;
  /** How much of each node guests may hold (docs/configuration.md#node-capacity). */
  room: RoomPolicy;
  /** --proxmox-vmid-range; absent or null: the datacenter's next-id range alone. */
  vmidRange?: VmidRange | null;
}

/** After the bootstrap hook, wait until the node is Ready (docs/configuration.md). */
export interface ReadyGate {
  /** The check's argv; null: the built-in kubelet healthz + node Ready check. */
  exec: string[] | null;
  /** Longest wait after the hook; 0: until shortly before Configure's timeout. */
  timeoutMs: number;
}

export interface TlsConfig {
  certPem: string;
  /** Secret. Never log it. */
  keyPem: string;
  /** Client CA bundle: present means mTLS. */
  caPem: string | null;
}

export interface Config {
  addr: ListenAddr;
  provider: string;
  backend: "proxmox" | "fake";
  fakeDelayMs: number;
  /** Present when backend is "proxmox". */
  proxmox: ProxmoxConfig | null;
  catalog: Map<string, InstanceType>;
  /** The validated offerings: what (instance type, zone) pairs exist and how many slots each. */
  offerings: readonly Offering[];
  /**
   * Every slot the offerings define, expanded from them on each read: the
   * kit reads it once at boot and nothing holds it afterwards (~80 bytes a
   * slot). What needs only the pairs reads `offerings`.
   */
  readonly slots: Slot[];
  /** "built-in" or the offerings file path, for the startup line. */
  offeringsSource: string;
  /** Zones the slots live in, in first-seen order. */
  zones: string[];
  /** The default template source: --template-name when set, else --template-vmid. */
  template: TemplateSource;
  bootstrapPath: string;
  bootstrapExec: string[];
  /** null: --ready-gate=false (CONFIGURED as soon as the hook exits 0). */
  readyGate: ReadyGate | null;
  reconcileIntervalMs: number;
  /** How long a graceful stop waits for running transitions (docs/install.md#upgrades-and-restarts). */
  shutdownTimeoutMs: number;
  /** Deno KV path; "" means in-memory only. */
  statePath: string;
  /** The admin socket's path (docs/security.md#the-admin-socket); null: none. */
  adminSocket: string | null;
  /** null when --metrics-addr is empty. */
  metricsAddr: ListenAddr | null;
  reflection: boolean;
  tls: TlsConfig | null;
  /** Lowest log level and line format (--log-level, --log-format or their variables). */
  log: LogSettings;
  /** Accepted but worth telling the operator at startup (e.g. offerings with no slot). */
  warnings: string[];
}

/** A configuration problem: main prints `error: <message>` on one line and exits 2. */
export class ConfigError extends Error {
  override name = "ConfigError";
}
