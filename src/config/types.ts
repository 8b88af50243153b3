// The validated, fully resolved configuration the rest of the program runs on.
// Produced only by loadConfig (src/config/load.ts); nothing downstream re-parses
// flags or files.

/** A listen address. host "" means every interface. */
export interface ListenAddr {
  host: string;
  port: number;
  /** As the operator wrote it, for logs. */
  raw: string;
}

export interface InstanceType {
  name: string;
  vcpu: number;
  memoryMib: number;
  /** Already resolved: a catalog entry with 0 takes --template-vmid. */
  templateVmid: number;
}

/** One speculative slot: a future machine, fully described before any VM exists. */
export interface Slot {
  /** `<provider>/OnDemand/<instance_type>/<zone>/<NNN>` */
  id: string;
  instanceType: string;
  zone: string;
  pricePerHour: number;
  /** From the offering; may be empty. Ordered [key, value] pairs. */
  resources: [string, string][];
  /** From the catalog: cpu = vCPU, memory = `NGi` or `NMi`. */
  allocatable: [string, string][];
  labels: [string, string][];
  templateVmid: number;
  vcpu: number;
  memoryMib: number;
}

export interface ProxmoxConfig {
  apiUrl: string;
  tokenId: string;
  /** Secret. Never log it. */
  tokenSecret: string;
  /** PEM text of the CA bundle, when --proxmox-ca-file was given. */
  caPem: string | null;
  /** Upper-case colon-separated SHA-256 (AB:CD:...), when --proxmox-tls-fingerprint was given. */
  fingerprint: string | null;
  pool: string;
  nodes: string[];
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
  slots: Slot[];
  /** "built-in" or the offerings file path, for the startup line. */
  offeringsSource: string;
  /** Zones the slots live in, in first-seen order. */
  zones: string[];
  templateVmid: number;
  bootstrapPath: string;
  bootstrapExec: string[];
  reconcileIntervalMs: number;
  /** Deno KV path; "" means in-memory only. */
  statePath: string;
  /** null when --metrics-addr is empty. */
  metricsAddr: ListenAddr | null;
  reflection: boolean;
  tls: TlsConfig | null;
}

/** A configuration problem: main prints `error: <message>` on one line and exits 2. */
export class ConfigError extends Error {
  override name = "ConfigError";
}
