// Public types of the simulator (re-exported from mod.ts).

import type { SimGuest, SimNodeResources } from "./captypes.ts";
import type {
  ClusterFaults,
  ClusterHandle,
  ClusterTiming,
  VersionOptions,
} from "./types_cluster.ts";

export interface SimTemplate {
  vmid: number;
  /** Default: the first node. */
  node?: string;
  name: string;
  tags?: string;
  description?: string;
  /** Config `agent` value; null means no agent key at all. Default "1". */
  agent?: string | null;
  cores?: number;
  /** MiB. Default 2048. */
  memory?: number;
  balloon?: number;
  /** Default true. false seeds an ordinary VM instead of a template. */
  template?: boolean;
  /** Seed as running (ordinary VMs only); its agent is up at once. */
  running?: boolean;
  /** Default true. false: clone with a different `target` is refused (local storage). */
  sharedStorage?: boolean;
  pool?: string;
  /**
   * Storage of the disk (`scsi0`). Default: the first shared storage with
   * `images` content (`ceph-vm` with the default storages), or `local-lvm`
   * when `sharedStorage` is false.
   */
  storage?: string;
  /**
   * More config keys, set last: `protection`, `sockets`, `vcpus`, `cpulimit`,
   * an `ide2` ISO or cloud-init drive, a `lock`, ... (clones copy them all).
   */
  config?: Record<string, string | number>;
  /** The guest OS: agent commands it blocks, no shell (guestcaps.ts); clones inherit it. */
  guest?: SimGuest;
  /** HA manages it with this requested state (`started`, `stopped`, ...): resources' `hastate`. */
  hastate?: string;
}

/** One storage.cfg entry. */
export interface SimStorage {
  id: string;
  /** Plugin type: dir, lvmthin, lvm, zfspool, nfs, cifs, rbd, cephfs, ... */
  type: string;
  /** storage.cfg `shared`; nfs, cifs, rbd, cephfs, iscsi, zfs, ... are shared whatever it says. */
  shared?: boolean;
  /** Content types, e.g. "images,rootdir". Default: the plugin's. */
  content?: string;
  /** storage.cfg `nodes`: where it exists. Default: every node. */
  nodes?: string[];
  /** Size in bytes (on each node, for a local storage). Default 1 TiB. */
  totalBytes?: number;
  /** Bytes in use (on each node, for a local storage). Default 50 GiB. */
  usedBytes?: number;
}

export interface SimLxc {
  vmid: number;
  node?: string;
  name: string;
  status?: "running" | "stopped";
}

export interface SimTiming extends ClusterTiming {
  /** Whole clone task duration. */
  cloneMs: number;
  /** First part of the clone: config is `{lock: clone}` only, no name/description. */
  cloneNamelessMs: number;
  /** start / stop / destroy / async config task duration. */
  taskMs: number;
  /** Guest agent answers "not running" until this long after start. */
  agentBootMs: number;
  /** cluster/resources shows name/status/template this late (pvestatd RRD cycle). */
  resourcesLagMs: number;
  /** How long an agent exec runs before exec-status reports exited. */
  execMs: number;
  /** flock timeout of a clone worker's config locks: the source (shared) and the newid (real PVE: 1000). */
  lockTimeoutMs: number;
  /** How long a protected call holds its pvedaemon worker (status/current, task status, PUT config...). */
  daemonCallMs: number;
  /** How long a clone POST holds its worker: the checks and the fork of its task (rig: ~200). */
  cloneForkMs: number;
  /** How long an agent call waits for guest-ping while the agent does not answer (qemu-server: 3000). */
  qgaPingTimeoutMs: number;
  /** One QGA command with the agent up (rig: ~65); ping, exec, exec-status take two, file-write six. */
  qgaRoundTripMs: number;
  /** Extra worker time per KiB a file-write carries. */
  fileWriteMsPerKiB: number;
  /** pveproxy gives up on a proxied call after this long without an answer: 596 (real: 30000). */
  proxyTimeoutMs: number;
  /** How long vdisk_alloc holds the storage lock per volume it allocates. */
  storageAllocMs: number;
  /** How long vdisk_alloc waits for the storage lock before the clone fails (real: 10000). */
  storageLockTimeoutMs: number;
}

export interface SimOptions extends VersionOptions {
  nodes?: string[];
  templates?: SimTemplate[];
  /** Containers: shown in cluster/resources (type lxc) and occupy VMIDs. Default one, vmid 150. */
  lxc?: SimLxc[];
  /** Existing pools. Default ["bigfleet"]. */
  pools?: string[];
  /** storage.cfg. Default: `local` (dir), `local-lvm` (lvmthin), `ceph-vm` (rbd, shared). */
  storages?: SimStorage[];
  tokenId?: string;
  tokenSecret?: string;
  auditHidden?: boolean;
  timing?: Partial<SimTiming>;
  legacyErrors?: boolean;
  authFailDelayMs?: number;
  /** Path the scripted guest treats as the bootstrap blob. Default "/run/bigfleet-bootstrap". */
  bootstrapPath?: string;
  /** argv prefix that runs the bootstrap (the path is appended). Default ["/bin/sh"]. */
  bootstrapExec?: string[];
  /**
   * The exact argv the guest answers as the node's readiness check (exit 0
   * once Ready, see faults.readyAfterMs). Default: the provider's built-in check.
   */
  readyExec?: string[];
  /** Listen port; 0 (default) picks a free one. */
  port?: number;
  /** Listen address. Default "127.0.0.1". */
  host?: string;
  /** POST/PUT body limit in bytes. Default 512 KiB (pve-http-server ≥ 5.2.2; older: 64 KiB). */
  maxBodyBytes?: number;
  /** Directory for certificates; default a fresh temp dir (removed on close). */
  certDir?: string;
  /**
   * The PVE release to behave like (default "8.4.1"): reported by /version and
   * node status; below 8.2 a `%XX` in a description reads back URI-unescaped.
   */
  pveVersion?: string;
  /** Initial `faults.acl`. */
  acl?: SimAcl;
  /** Initial `faults.datacenter` (datacenter.cfg: tag policy, next-id range). */
  datacenter?: SimDatacenter;
  /** pvedaemon `max_workers` on each node (default 3, as pve-manager ships it). */
  pvedaemonWorkers?: number;
  /** Per node: memory, CPUs, swap, host use, bridges (capacity.ts); unnamed nodes get defaults. */
  nodeResources?: Record<string, SimNodeResources>;
  /** Bridges of every node → MTU (default `{vmbr0: 1500}`); SDN vnets of `acl.vnetZones` too. */
  bridges?: Record<string, number>;
}

/** The datacenter.cfg options the simulator models (policy.ts). */
export interface SimDatacenter {
  /** `user-tag-access`: `user-allow` (default free) and the literal `user-allow-list`. */
  userTagAccess?: {
    userAllow?: "free" | "list" | "existing" | "none";
    userAllowList?: string[];
  };
  /** `registered-tags`: setting or removing them needs Sys.Modify on /. */
  registeredTags?: string[];
  /** `next-id`: the range /cluster/nextid searches, lower inclusive, upper exclusive. */
  nextId?: { lower?: number; upper?: number };
}

/** A volume vdisk_free fails on (an RBD image still watched, an LV still open). */
export interface VolumeFreeFailure {
  /** Volume ids it applies to (a string matches as a substring). */
  match: string | RegExp;
  /** The storage plugin's error, e.g. `rbd rm 'vm-105-disk-0' error: rbd: error: image still has watchers`. */
  message: string;
  /** How many frees fail before one succeeds; undefined = every one. */
  times?: number;
}

/** One ACL entry as `pveum acl modify <path> --roles … --propagate …` writes it. */
export interface SimAclEntry {
  path: string;
  /** The privileges of the roles granted there. */
  privs: string[];
  /** Default false (pveum's default is true; the model wants it said). */
  propagate?: boolean;
  /** Whom it is granted to: the token (default) or its user. */
  ugid?: "user" | "token";
}

export interface SimAcl {
  entries: SimAclEntry[];
  /** SDN vnet → zone; any other bridge is in `localnetwork`. */
  vnetZones?: Record<string, string>;
}

export type TaskType =
  | "qmclone"
  | "qmstart"
  | "qmstop"
  | "qmshutdown"
  | "qmdestroy"
  | "qmconfig"
  | "imgdel"
  | "resize";

export interface Http596Rule {
  /** Matched against the path below /api2/json (no query). A string matches as a substring. */
  path: string | RegExp;
  method?: string;
  /** How many matching requests to hit; the rule is dropped at 0. */
  count: number;
  /** Default 596. 595/597/599/502 work too. */
  status?: number;
  /** Default "Connection timed out". */
  reason?: string;
  /** Wait this long before answering (real PVE: 30000). */
  delayMs?: number;
  /** Default true: the operation still happens, only the answer is lost. */
  performed?: boolean;
}

export interface TaskErrorRule {
  message: string;
  /** How many tasks to fail; undefined = until cleared. */
  times?: number;
}

export interface GuestResult {
  exitcode?: number;
  signal?: number;
  stdout?: string | Uint8Array;
  stderr?: string | Uint8Array;
  /** Extra run time on top of timing.execMs. */
  extraMs?: number;
}

export interface SimFaults extends ClusterFaults {
  /** The next n clone POSTs collide on newid with a foreign clone (§7). */
  nextidRace: number;
  /** How the collision shows (§7). Default "config-exists". */
  nextidRaceKind: "config-exists" | "lock-timeout" | "other-node" | "sync";
  /** Clone tasks end "WARNINGS: 1" (a success). */
  cloneWarnings: boolean;
  /**
   * A clone task that fails after writing its temporary config leaves its
   * half-made VM behind (unlocked, with the volumes made so far) instead of
   * removing it, as a worker killed during its cleanup would.
   */
  cloneCleanupFails: boolean;
  /**
   * VMIDs whose clone stays in its temporary config (nameless, locked) after
   * its first disk's time until taken out of this list: a clone a test can
   * hold at that stage for as long as it needs, whatever the machine's pace.
   */
  cloneHeld: number[];
  /** Fail tasks of a type in the worker with this text. */
  taskError: Partial<Record<TaskType, string | TaskErrorRule>>;
  /**
   * The next N calls that would fork a worker of a type answer 500 `got no
   * worker upid - start worker failed` and do nothing: pvedaemon's
   * fork_worker read the child's UPID from a pipe and got nothing (the read
   * cut short by a signal when another worker ended, as under load); the
   * child, never told to go on, exits before the task's work.
   */
  workerStartFailures: Partial<Record<TaskType, number>>;
  /** Answer matching requests with 596 (or another proxy status), plain-text body. */
  http596: Http596Rule[];
  /** Every agent call answers this much later. */
  agentSlowMs: number;
  /** The next n agent calls fail with "VM <id> qmp command 'guest-…' failed - got timeout". */
  agentTimeouts: number;
  /** The guest agent never comes up ("QEMU guest agent is not running"). */
  agentDown: boolean;
  bootstrapExitCode: number;
  bootstrapStderr: string;
  bootstrapStdout: string;
  /** Extra bootstrap run time. */
  bootstrapDelayMs: number;
  drainExitCode: number;
  drainStderr: string;
  /** Extra drain run time. */
  drainDelayMs: number;
  /**
   * How long after a bootstrap run that exited 0 the node turns Ready for the
   * readiness check (SimOptions.readyExec); null: never. Default 0.
   */
  readyAfterMs: number | null;
  /** 401 "Authentication failed!" for everything. */
  unauthorized: boolean;
  /** 403 Permission check failed: true for every path, or a path pattern. */
  forbidden: boolean | string | RegExp;
  /** Like SimOptions.auditHidden, switchable at run time. */
  auditHidden: boolean;
  /** Storages the token has neither Datastore.Audit nor Datastore.AllocateSpace on: left out of GET /storage and resources. */
  hiddenStorages: string[];
  /** Called with every authenticated, routed request before it is handled (to stage races). */
  onRequest?: (method: string, path: string) => void;
  /**
   * Image storages (ids) that are offline on every node: a destroy with
   * destroy-unreferenced-disks=1 then dies with `storage '<id>' is not online`
   * after freeing the referenced disks. Listed in resources as status unknown.
   */
  offlineStorages: string[];
  /**
   * Nodes that are down. Every per-node route (`/nodes/<node>/...`, proxied by
   * pveproxy) answers `offlineReply` with an empty body; cluster/resources
   * still lists their guests, with status `unknown` and no RRD fields; /nodes
   * and /cluster/resources show the node `offline`, /cluster/status `online: 0`.
   */
  offlineNodes: string[];
  /**
   * Nodes whose pvestatd has sent no status yet (just started, or stopped):
   * /nodes and /cluster/resources list them `unknown` without figures (their
   * VMs likewise), while every call to the node itself is answered.
   */
  unreportedNodes: string[];
  /**
   * ACLs of the API token (see acl.ts); null (default: SimOptions.acl) grants
   * everything. Enforced for the SDN.Use checks of clone on the source's NICs.
   */
  acl: SimAcl | null;
  /** What a request for an offline node gets. Default 595 "No route to host", no delay. */
  offlineReply: { status: number; reason: string; delayMs: number };
  /** Override the scripted guest: return a result to take over, undefined to fall through. */
  execHandler?: (argv: string[], stdin: Uint8Array, vmid: number) => GuestResult | undefined;
  /** datacenter.cfg (policy.ts); default: nothing set (tags free, next-id 100..1000000). */
  datacenter: SimDatacenter;
  /**
   * Volumes whose vdisk_free fails: destroy_vm only warns (`Could not remove
   * disk '<volid>', check manually: <message>`, the task still ends OK) and
   * the volume stays (`sim.leftoverVolumes()`); a storage content DELETE of
   * it fails its imgdel task with the message while the failure holds.
   */
  volumeFreeFailures: VolumeFreeFailure[];
  /**
   * The next n destroy tasks die right after destroy_vm wrote the config
   * stub `lock: destroyed` (disks freed): the VMID keeps that stub (and its
   * pool), the task ends `unexpected status` with no final log line.
   */
  destroyDies: number;
}

export interface SimFileWrite {
  file: string;
  /** As received. */
  content: string;
  encode: boolean;
  /** What landed in the guest file. */
  bytes: Uint8Array;
  at: number;
}

export interface SimExec {
  pid: number;
  command: string[];
  inputData: string;
  startedAt: number;
  doneAt: number;
  exitcode?: number;
  signal?: number;
  stdout: string;
  stderr: string;
  /** "bootstrap" | "drain" | "shell" | "custom" | "ready". */
  kind: string;
  /** exec-status already reported exited:1. */
  reported: boolean;
}

export interface SimVm {
  vmid: number;
  node: string;
  status: "running" | "stopped";
  template: boolean;
  name?: string;
  tags?: string;
  lock?: string;
  description?: string;
  pool?: string;
  /** Created by the simulator as the other party of a race, or seeded. */
  foreign: boolean;
  /** The current config (pending changes not applied). */
  config: Record<string, string | number>;
  /** The config's pending section. */
  pending: Record<string, string | number>;
  /** Guest files (path → bytes). */
  files: Record<string, Uint8Array>;
  fileWrites: SimFileWrite[];
  execs: SimExec[];
  bootstrapRuns: { path: string; argv: string[]; content: Uint8Array; at: number }[];
  drains: { command: string[]; at: number }[];
  /** Each run of the readiness check (SimOptions.readyExec): when, and whether it said Ready. */
  readyChecks: { at: number; ready: boolean }[];
  starts: number;
  stops: number;
}

export interface SimRequestLog {
  at: number;
  method: string;
  /** Below /api2/json, e.g. "/cluster/resources". */
  path: string;
  query: string;
  /** Parsed parameters (query + body), when parsing got that far. */
  params?: Record<string, unknown>;
  authenticated: boolean;
  /** The token that authenticated it. */
  tokenId?: string;
  status: number;
  reason: string;
  /** For a protected call: how long it waited for a pvedaemon worker (ms). */
  workerWaitMs?: number;
  /** For a protected call: the node whose pvedaemon ran it. */
  workerNode?: string;
}

export interface SimTask {
  upid: string;
  node: string;
  type: TaskType;
  id: string;
  user: string;
  status: "running" | "stopped";
  exitstatus?: string;
  starttime: number;
}

export interface Simulator extends ClusterHandle {
  url: string;
  host: string;
  port: number;
  caPem: string;
  caFile: string;
  fingerprint: string;
  /** Unrelated CA for negative tests. */
  wrongCaPem: string;
  wrongCaFile: string;
  tokenId: string;
  tokenSecret: string;
  /** Full Authorization header value. */
  authHeader: string;
  /** Accept another token beside the others (a rotation that keeps the old one for a while). */
  addToken(tokenId: string, secret: string): void;
  /** Stop accepting a token (the first one included): its requests get 401 from now on. */
  removeToken(tokenId: string): void;
  faults: SimFaults;
  /** The simulator's durations, live: a test may shorten one mid-test (a cache ageing out). */
  timing: SimTiming;
  vms(): SimVm[];
  vm(vmid: number): SimVm | undefined;
  tasks(): SimTask[];
  requests: SimRequestLog[];
  stopVmOutOfBand(vmid: number): void;
  startVmOutOfBand(vmid: number): void;
  /** Someone deleted the VM by hand (no task). */
  deleteVmOutOfBand(vmid: number): void;
  /**
   * Change a VM's config outside the API (another client, a task we do not
   * model), e.g. a stranger's clone held at `{lock: "clone"}`. `edit` mutates
   * the config in place; cluster/resources picks it up like any change.
   */
  editVmOutOfBand(vmid: number, edit: (config: Record<string, string | number>) => void): void;
  /** Seed an extra VM or template at run time. */
  addVm(t: SimTemplate): void;
  /** What the host of `node` itself uses from now on (memory MiB, CPU fraction), as by other software. */
  setNodeLoad(node: string, load: { hostUsedMib?: number; hostCpu?: number }): void;
  /** Set (or with undefined, clear) a VM's config `lock` by hand, as `qm set --lock` / `qm unlock` do. */
  setLock(vmid: number, lock: string | undefined): void;
  /** A vzdump run on the VM: `lock: backup` for `ms`, then unlocked. Resolves when it ends. */
  backupVm(vmid: number, ms: number): Promise<void>;
  /** Volumes a destroy could not free and nothing has freed since. */
  leftoverVolumes(): { volid: string; node: string; storage: string; vmid: number }[];
  /** Change config keys by hand (root on the node): `null` deletes a key. */
  editConfig(vmid: number, changes: Record<string, string | number | null>): void;
  /**
   * Someone holds the VM's config flock exclusively for `ms` (a `qm set`, a
   * migration): a clone of it fails `can't lock file '…/lock-<vmid>.conf' -
   * got timeout` when it cannot take its shared lock within lockTimeoutMs.
   */
  holdConfigLock(vmid: number, ms: number): Promise<void>;
  /**
   * Someone else's allocation holds a storage's lock for `ms` (the flock on
   * `node` for local storage, the cluster lock for shared storage).
   */
  holdStorageLock(storage: string, ms: number, node?: string): Promise<void>;
  /** Other clients' calls keep `count` of `node`'s pvedaemon workers busy for `until` ms, or until it settles. */
  occupyWorkers(node: string, count: number, until: number | Promise<unknown>): Promise<void>;
  /** Each node's pvedaemon: workers, busy and queued now, the longest wait and most busy so far. */
  workerPools(): Record<
    string,
    { size: number; busy: number; queued: number; maxWaitMs: number; peakBusy: number }
  >;
  close(): Promise<void>;
}
