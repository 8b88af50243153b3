// What one backend instance remembers of the VMs it touched, and the only
// writer of it: the clones it runs (recognisable before PVE writes their
// name), the machine each VMID was last seen to carry (what a VM on a node
// that is down was), the nodes its templates are on (where clone tasks
// run), and the VMIDs it destroyed (a 403 on them afterwards
// means gone: a destroy under a pool-scoped token drops the token's rights
// on the VMID). Nothing here survives a restart; the cluster is the record.

/** How many destroyed VMIDs are kept: only a repeated Delete's 403 needs them, so the newest. */
const DESTROYED_KEPT = 10_000;

export class BackendMemory {
  /** vmid → machine id of the clones this process runs into it. */
  readonly #cloning = new Map<number, string>();
  /** The UPIDs of those clones' tasks. */
  readonly #cloneTasks = new Set<string>();
  /** vmid → machine id of every marker read so far. */
  readonly #known = new Map<number, string>();
  /** vmid → machine id of the VMs this process destroyed, oldest first. */
  readonly #destroyed = new Map<number, string>();
  /** The nodes templates were found on: where clone tasks run. */
  readonly #templateNodes = new Set<string>();

  /** A clone for `machineId` into `vmid` is about to be started. */
  cloneStarted(vmid: number, machineId: string): void {
    this.#cloning.set(vmid, machineId);
  }

  /** The clone into `vmid` is over (made, failed or given up): the VMID is no longer ours to follow. */
  cloneEnded(vmid: number): void {
    this.#cloning.delete(vmid);
  }

  /** The task `upid` of one of our clones runs; followed until cloneTaskEnded. */
  cloneTaskStarted(upid: string): void {
    this.#cloneTasks.add(upid);
  }

  cloneTaskEnded(upid: string): void {
    this.#cloneTasks.delete(upid);
  }

  /** The machine whose clone this process runs into `vmid`, if any. */
  cloningFor(vmid: number): string | undefined {
    return this.#cloning.get(vmid);
  }

  /** The VMIDs this process is cloning into for `machineId`. */
  clonesOf(machineId: string): number[] {
    return [...this.#cloning].filter(([, owner]) => owner === machineId).map(([vmid]) => vmid);
  }

  /**
   * Whether this process follows the clone task `upid`: a running clone task
   * of our token that it does not follow is one it lost track of.
   */
  followsTask(upid: string): boolean {
    return this.#cloneTasks.has(upid);
  }

  /** Create made or adopted `vmid` for `machineId`: known as its VM, no longer destroyed by us. */
  created(vmid: number, machineId: string): void {
    this.#known.set(vmid, machineId);
    this.#destroyed.delete(vmid);
  }

  /** A marker read on `vmid`: the machine it names, or null when the VM carries none. */
  markerRead(vmid: number, machineId: string | null): void {
    if (machineId !== null) this.#known.set(vmid, machineId);
    else this.#known.delete(vmid);
  }

  /** The machine whose marker `vmid` carried when last read, if any. */
  knownAs(vmid: number): string | undefined {
    return this.#known.get(vmid);
  }

  /** Forget what is known of VMIDs the listing no longer shows: they may come back as anyone's. */
  forgetUnlisted(listed: ReadonlySet<number>): void {
    for (const vmid of this.#known.keys()) if (!listed.has(vmid)) this.#known.delete(vmid);
  }

  /** This process destroyed `vmid`, the VM of `machineId`. */
  destroyed(vmid: number, machineId: string): void {
    this.#destroyed.set(vmid, machineId);
    for (const id of this.#destroyed.keys()) {
      if (this.#destroyed.size <= DESTROYED_KEPT) break;
      this.#destroyed.delete(id);
    }
  }

  /** Whether this process destroyed `vmid` (as `machineId`'s VM, when given). */
  didDestroy(vmid: number, machineId?: string): boolean {
    const owner = this.#destroyed.get(vmid);
    return owner !== undefined && (machineId === undefined || owner === machineId);
  }

  /** A template was found on `node`: its clone tasks run there. */
  templateFound(node: string): void {
    this.#templateNodes.add(node);
  }

  /** The nodes templates were found on. */
  templateNodes(): string[] {
    return [...this.#templateNodes];
  }

  /** `machineId`'s Delete is done: its VMID is free for anyone now, no longer known as its VM. */
  deleted(vmid: number, machineId: string): void {
    if (this.#known.get(vmid) === machineId) this.#known.delete(vmid);
  }
}
