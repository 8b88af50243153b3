// The lifecycle kit: every obligation of the CapacityProvider contract that is
// not about the substrate. Fencing, idempotency, the state machine, async
// dispatch with timeouts, the List cursor and durable state live here; the
// Backend only makes, bootstraps, drains, destroys and describes hosts. The
// rules, and which module holds each: docs/design.md.
//
// Accept paths are synchronous from the first check to the state change, so
// parallel identical calls in one event loop collapse to one operation. Every
// answer (success or error) waits until the changes made so far are durable;
// "answers and durability" below says what happens when they cannot be.

import { getLogger } from "@logtape/logtape";
import type { Backend, HostedMachine, HostInspection } from "./backend.ts";
import { Code, KitError } from "./errors.ts";
import { DeadlineError, formatMs, withDeadline } from "../async/deadline.ts";
import { createFenceTable } from "./fence.ts";
import type { Token } from "./fence.ts";
import { openFleet } from "./fleet.ts";
import type { FleetView, Selection } from "./fleet.ts";
import { bootInventory, planReconcile } from "./inventory.ts";
import { describeChange } from "./capacity.ts";
import { EDGES, NO_PAIRS, State, STATE_NAMES } from "./model.ts";
import type { MachineRecord, OpKind, Pairs, Slot } from "./model.ts";
import type { StateStore } from "./store.ts";
import { type Timeouts, withDefaultTimeouts } from "./timeouts.ts";
import { createTransitionLog, type KitObserver } from "./transitions.ts";

export interface KitOptions {
  provider: string;
  backend: Backend;
  store: StateStore;
  slots: readonly Slot[];
  /** Milliseconds per transition kind; defaults 8m/8m/15m/5m (docs/design.md#transitions-and-timeouts). */
  timeouts?: Partial<Timeouts>;
  /** Largest shard_metadata (keys + values, UTF-8 bytes) accepted. */
  maxMetadataBytes?: number;
  /** Told about every record change and transition (metrics). */
  observer?: KitObserver;
}

// The lifecycle requests, as the server's codec decodes them (src/server/codec.ts).

/** What every lifecycle call carries; all a Create or a Delete carries. */
export interface Call {
  machineId: string;
  token: Token;
}
export interface ConfigureCall extends Call {
  clusterId: string;
  /** Secret: handed to the backend, never stored. */
  bootstrap: Uint8Array;
  shardMetadata: Pairs;
}
export interface DrainCall extends Call {
  graceSeconds: bigint;
}

/** Each lifecycle call's request. */
interface CallOf {
  create: Call;
  configure: ConfigureCall;
  drain: DrainCall;
  delete: Call;
}

/** What one kind of lifecycle call does beyond the order all share (see RULES in startKit). */
interface KindRule<C extends Call> {
  /** The kind's request checks: after the fence, before the machine is looked up. */
  check?(call: C): void;
  /** The backend's admission of a legal start: a refusal leaves the machine as it is. */
  admit?(m: MachineRecord): string | null;
  /** The machine as it enters its transitional state (given: state, op id, last_error cleared). */
  enter?(m: MachineRecord, call: C): MachineRecord;
  /** The backend's part, under the kind's timeout; resolves to what it learned about the machine. */
  work(
    m: MachineRecord,
    call: C,
    opId: string,
    signal: AbortSignal,
  ): Promise<Partial<MachineRecord>>;
  /** The machine once the work succeeded (given: target state, work's result); null drops it. */
  done?(m: MachineRecord): MachineRecord | null;
}

export interface Ack {
  operationId: string;
  machine: MachineRecord;
}

export type ListQuery = Selection;

export interface ListResult {
  machines: MachineRecord[];
  revision: number;
}

export interface ReconcileResult {
  /** Host refs updated: VMs that moved, and FAILED machines' VMs found. */
  changed: number;
  /** Managed VMs no machine claimed, added as orphans. */
  orphans: number;
  /** SPECULATIVE machines whose VM was found: IDLE again (a restored older state). */
  rejoined: number;
}

/** What an operator asks of a FAILED machine (docs/troubleshooting.md#machines-failed). */
export type RecoverAction = "destroy" | "adopt";

export interface RecoverCall {
  machineId: string;
  action: RecoverAction;
  /** false: only say what would be done. */
  apply: boolean;
}

export interface RecoverResult {
  /** What was done, or would be done. */
  plan: string;
  /** The machine's host as the backend found it; null when it has none. */
  host: HostInspection | null;
  before: MachineRecord;
  /** The machine afterwards; null when not applied, or when it left the inventory (no slot). */
  after: MachineRecord | null;
  applied: boolean;
}

export interface BackupResult {
  machines: number;
  fences: number;
  revision: number;
}

export interface Kit {
  readonly size: number;
  /** What a changed set of slots did at boot (`+N slots, -M retired, K pending`); null for a new fleet. */
  readonly capacityChange: string | null;
  create(c: Call): Promise<Ack>;
  configure(c: ConfigureCall): Promise<Ack>;
  drain(c: DrainCall): Promise<Ack>;
  delete(c: Call): Promise<Ack>;
  get(id: string): Promise<MachineRecord>;
  list(q: ListQuery): Promise<ListResult>;
  /**
   * One pass of substrate refresh: host refs follow the VMs, unknown VMs become
   * orphans, a SPECULATIVE slot with a VM rejoins it IDLE; never touches a
   * binding or last_error, never destroys anything.
   */
  reconcile(signal: AbortSignal): Promise<ReconcileResult>;
  /**
   * An operator's intervention on a FAILED machine, never reached by BigFleet:
   * `destroy` stops and destroys its VM (if any) and returns the slot to
   * SPECULATIVE; `adopt` makes a FAILED Create whose VM is usable IDLE on it.
   * Refused (FAILED_PRECONDITION) for a machine that is not FAILED or a host
   * that does not qualify; the change bumps the revision like any other.
   */
  recover(call: RecoverCall): Promise<RecoverResult>;
  /**
   * Write the whole state as it is at one instant (machines, fence marks,
   * revision) into `target`, a store that has never been written: a
   * consistent online copy that loads like the live state file.
   */
  backup(target: StateStore): Promise<BackupResult>;
  /** Transitions (and recoveries) whose backend work is still running. */
  readonly running: number;
  /** FAILED machines with a host ref (their VM was seen) and without. */
  countFailed(): { withHost: number; withoutHost: number };
  /**
   * The first step of a graceful stop: from now on lifecycle calls (and
   * reconcile passes) are refused with UNAVAILABLE before they change
   * anything, while Get and List keep answering. Resolves once no transition
   * runs, or when `signal` aborts; either way with the ids of the machines
   * whose transition is still running.
   */
  finish(signal: AbortSignal): Promise<string[]>;
  /**
   * finish() for up to `waitMs`, then stop reacting to completions and flush
   * the store. Anything still running comes back FAILED after a restart, as
   * the contract requires.
   */
  close(waitMs?: number): Promise<void>;
}

const MAX_ID_BYTES = 512;
/** Bound of an adoption's inspection (a destroy has the Delete timeout). */
const ADOPT_MS = 2 * 60_000;
const MAX_ERROR_CHARS = 4096;
const DEFAULT_MAX_METADATA = 8 * 1024 * 1024;
const utf8 = new TextEncoder();
const log = getLogger(["bigfleet", "kit"]);

export async function startKit(opts: KitOptions): Promise<Kit> {
  const { backend, store, provider } = opts;
  const timeouts = withDefaultTimeouts(opts.timeouts);
  const maxMetadata = opts.maxMetadataBytes ?? DEFAULT_MAX_METADATA;

  // ---- boot: reload, or build the first inventory -------------------------
  const boot = await bootInventory(store, backend, provider, opts.slots);
  const fences = createFenceTable(store, boot.fences);
  // Written by the fleet and committed: a new fleet whole, a restored one's changes in one batch.
  const fleet = await openFleet(store, boot, opts.observer?.machineChanged);
  const transitions = createTransitionLog(opts.observer);
  const capacityChange = boot.capacity ? describeChange(boot.capacity) : null;
  log.info("inventory ready: {machines} machines, revision {rev}, state {store}", {
    machines: fleet.size,
    // Reading the committed view also drops the fleet's bookkeeping of the boot's writes.
    rev: fleet.committedView.revision,
    store: store.description,
    restored: boot.restored,
    interrupted: boot.interrupted,
    ...(capacityChange ? { capacity: capacityChange } : {}),
  });
  for (const m of boot.capacity?.mismatched ?? []) {
    log.warn(
      "slot {machineId} now names {now} but the machine is {was}: left as it is (delete it to re-create)",
      { machineId: m.id, now: m.now, was: m.was },
    );
  }

  let closed = false;
  /** Set by finish(): lifecycle calls are refused from then on. */
  let finishing = false;
  /** Background transitions still running, by machine id; finish() waits for them. */
  const inflight = new Map<Promise<void>, string>();
  let opCounter = 0;
  // Unique per process life: op ids never repeat across restarts.
  const bootId = Date.now().toString(36) + crypto.randomUUID().slice(0, 6);

  // ---- answers and durability ---------------------------------------------
  //
  // Every answer waits until the changes made so far are committed, so nothing
  // a client saw can be lost by a crash right after. When the store cannot
  // commit (disk full, read-only filesystem):
  // - a lifecycle call (or reconcile pass) is refused with UNAVAILABLE before
  //   it changes anything;
  // - a call whose own commit fails is answered UNAVAILABLE too, not
  //   acknowledged. Its change stays queued in memory and the store keeps
  //   retrying, so it lands when the disk recovers (or never, if the process
  //   dies first). Either way is allowed: an unacknowledged call may or may not
  //   have happened, and the client's retry replays it idempotently (the same
  //   operation id once the change has landed);
  // - reads answer from the committed view (src/kit/fleet.ts): what a restart
  //   right now would load, never the queued changes, so they keep working and
  //   the revision they show never goes backwards across a crash.
  // docs/design.md#answers-and-durability; docs/configuration.md#when-the-state-disk-fails
  // says the same for operators.

  /** A lifecycle call or reconcile pass: refused while the store is failing, answered once committed. */
  async function answer<T>(fn: () => T): Promise<T> {
    refuseWhileFinishing();
    if (store.failure) {
      throw new KitError(
        Code.Unavailable,
        `state store cannot commit (${store.failure}); nothing was changed, retry later`,
      );
    }
    let result: T;
    try {
      result = fn();
    } catch (e) {
      await awaitCommit();
      throw e;
    }
    await awaitCommit();
    return result;
  }

  function refuseWhileFinishing(): void {
    if (finishing) {
      throw new KitError(
        Code.Unavailable,
        "the provider is shutting down; nothing was changed, retry against its next instance",
      );
    }
  }

  async function awaitCommit(): Promise<void> {
    try {
      await store.durable();
    } catch (e) {
      throw commitFailed(e, "the call is not acknowledged, retry it");
    }
  }

  function commitFailed(e: unknown, advice: string): KitError {
    const why = e instanceof Error ? e.message : String(e);
    return new KitError(Code.Unavailable, `state store commit failed (${why}); ${advice}`);
  }

  /** A read: from memory once committed; from the committed view while the store is failing. */
  async function read<T>(fn: (view: FleetView) => T): Promise<T> {
    if (!store.failure) {
      let out: { value: T } | { error: unknown };
      try {
        out = { value: fn(fleet) };
      } catch (error) {
        out = { error };
      }
      const failed = await store.durable().then(() => false, () => true);
      if (!failed) {
        if ("value" in out) return out.value;
        throw out.error;
      }
    }
    return fn(fleet.committedView);
  }

  function checkId(id: string, what: string): void {
    if (id === "") throw new KitError(Code.InvalidArgument, `${what} is required`);
    if (utf8.encode(id).length > MAX_ID_BYTES) {
      throw new KitError(Code.InvalidArgument, `${what} is longer than ${MAX_ID_BYTES} bytes`);
    }
  }

  // ---- what each kind does -----------------------------------------------
  //
  // The transition rules in one place, read with EDGES (model.ts): where each
  // kind may start, what it shows meanwhile and where it lands. accept() runs
  // `check` and `enter`, the deadline runs `work`, complete() applies `done`.

  const RULES: { [K in OpKind]: KindRule<CallOf[K]> } = {
    create: {
      // The zone may have no room for the machine now: RESOURCE_EXHAUSTED, still SPECULATIVE.
      admit: (m) =>
        backend.admit?.({ machineId: m.id, instanceType: m.instanceType, zone: m.zone }) ?? null,
      work: async (m, _call, opId, signal) => {
        // BigFleet facts only: the backend resolves sizing and source itself.
        const { hostRef } = await backend.create({
          machineId: m.id,
          operationId: opId,
          instanceType: m.instanceType,
          zone: m.zone,
        }, signal);
        return { hostRef };
      },
    },
    configure: {
      check: checkConfigure,
      // The binding is visible from CONFIGURING on. The map is copied: the
      // caller's array may change after the call, the stored record may not.
      enter: (m, call) => ({
        ...m,
        cluster: call.clusterId,
        shardMetadata: call.shardMetadata.map(([k, v]) => [k, v] as const),
      }),
      work: async (m, call, _opId, signal) => {
        const { clusterId, bootstrap } = call;
        await backend.configure(hosted(m), { clusterId, bootstrap }, signal);
        return {};
      },
    },
    drain: {
      work: async (m, call, _opId, signal) => {
        await backend.drain(hosted(m), call.graceSeconds, signal);
        return {};
      },
      // The binding ends when the Drain completes, not before: the shard needs
      // the cluster while DRAINING.
      done: unbound,
    },
    delete: {
      work: async (m, _call, _opId, signal) => {
        await backend.delete(hosted(m), signal);
        return {};
      },
      // The host is released too; a machine without a slot leaves the inventory.
      done: (m) => m.orphan ? null : { ...unbound(m), hostRef: "" },
    },
  };

  function hosted(m: MachineRecord): HostedMachine {
    return { machineId: m.id, hostRef: m.hostRef };
  }

  function checkConfigure(call: ConfigureCall): void {
    if (call.clusterId === "") {
      throw new KitError(Code.InvalidArgument, "cluster_id is required");
    }
    let bytes = 0;
    for (const [k, v] of call.shardMetadata) bytes += utf8.encode(k + v).length;
    if (bytes > maxMetadata) {
      throw new KitError(
        Code.InvalidArgument,
        `shard_metadata is ${bytes} bytes; the limit is ${maxMetadata}`,
      );
    }
  }

  // ---- accepting a call --------------------------------------------------

  /**
   * The order every lifecycle call shares (docs/design.md#order-of-checks-and-idempotency):
   * empty id, fence, the kind's request checks, not-found, idempotent replay,
   * position, the backend's admission (Create). On a legal start
   * the machine enters its transitional state before this returns and the
   * kind's work starts under its timeout.
   */
  function accept<K extends OpKind>(kind: K, call: CallOf[K]): Ack {
    const rule: KindRule<CallOf[K]> = RULES[kind];
    checkId(call.machineId, "machine_id");
    if (call.token.shardId !== "") checkId(call.token.shardId, "shard_id");
    fences.admit(call.machineId, call.token);
    rule.check?.(call);
    const m = fleet.get(call.machineId);
    if (!m) throw new KitError(Code.NotFound, `machine ${call.machineId} not found`);
    const edge = EDGES[kind];
    const previous = m.ops[kind];
    if (previous && (m.state === edge.via || m.state === edge.to)) {
      return { operationId: previous, machine: m };
    }
    if (m.state !== edge.from) {
      throw new KitError(
        Code.Internal,
        `cannot ${kind} machine ${m.id} in state ${STATE_NAMES[m.state]}` +
          (m.state === State.Failed ? " (FAILED is terminal)" : ""),
      );
    }
    const refusal = rule.admit?.(m) ?? null;
    if (refusal !== null) throw new KitError(Code.ResourceExhausted, refusal);
    const opId = `op-${bootId}-${++opCounter}`;
    const via: MachineRecord = {
      ...m,
      state: edge.via,
      lastError: "",
      ops: { ...m.ops, [kind]: opId },
    };
    const entered = rule.enter ? rule.enter(via, call) : via;
    fleet.put(entered);
    transitions.started(kind, entered, opId, call.token);
    const ms = timeouts[kind];
    const finished: Promise<void> = withDeadline(
      ms,
      `${kind} timed out after ${formatMs(ms)}`,
      (signal) => rule.work(entered, call, opId, signal),
    ).then(
      (patch) => complete(kind, entered.id, opId, patch, null),
      (err) => complete(kind, entered.id, opId, {}, err),
    ).finally(() => inflight.delete(finished));
    inflight.set(finished, entered.id);
    return { operationId: opId, machine: entered };
  }

  // ---- background completions ---------------------------------------------

  function complete(
    kind: OpKind,
    id: string,
    opId: string,
    patch: Partial<MachineRecord>,
    err: unknown,
  ): void {
    if (closed) return;
    const m = fleet.get(id);
    const edge = EDGES[kind];
    // Stale: the machine left this transition (timed out, restarted) meanwhile.
    if (!m || m.state !== edge.via || m.ops[kind] !== opId) {
      log.debug("discarding stale {kind} completion for {machineId}", {
        kind,
        machineId: id,
        operationId: opId,
      });
      return;
    }
    if (err !== null) {
      const message = err instanceof Error ? err.message : String(err);
      // The deadline's own message already reads `<kind> timed out after …`; a backend's
      // text is the backend's, whatever it begins with.
      const lastError = (err instanceof DeadlineError ? message : `${kind} failed: ${message}`)
        .slice(0, MAX_ERROR_CHARS);
      const failed: MachineRecord = { ...m, state: State.Failed, lastError };
      fleet.put(failed);
      transitions.ended(kind, failed, opId, lastError);
      return;
    }
    const landed: MachineRecord = { ...m, ...patch, state: edge.to };
    const done = RULES[kind].done;
    const next = done ? done(landed) : landed;
    if (next === null) fleet.remove(id);
    else fleet.put(next);
    transitions.ended(kind, next ?? landed, opId, null);
  }

  // ---- an operator's recovery of a FAILED machine ---------------------------

  /** Machines with a recovery under way: one at a time each. */
  const recovering = new Set<string>();

  async function recover(call: RecoverCall): Promise<RecoverResult> {
    refuseWhileFinishing();
    if (store.failure) {
      throw new KitError(
        Code.Unavailable,
        `state store cannot commit (${store.failure}); retry later`,
      );
    }
    const { machineId: id, action } = call;
    checkId(id, "machine_id");
    const before = fleet.get(id);
    if (!before) throw new KitError(Code.NotFound, `machine ${id} not found`);
    if (before.state !== State.Failed) {
      throw refused(
        `machine ${id} is ${STATE_NAMES[before.state]}, not FAILED: nothing to recover`,
      );
    }
    // Which transition failed is recorded only in last_error, which the kit always writes as
    // `<kind> …` (complete(), the deadline, inventory.ts's restart note): its own format.
    if (action === "adopt" && !before.lastError.startsWith("create ")) {
      throw refused(
        `only a FAILED Create can be adopted; ${id} failed with "${before.lastError}": ` +
          "use --destroy",
      );
    }
    if (recovering.has(id)) {
      throw new KitError(Code.Unavailable, `a recovery of ${id} is already running`);
    }
    recovering.add(id);
    const ms = action === "destroy" ? timeouts.delete : ADOPT_MS;
    const work = withDeadline(
      ms,
      `recover --${action} of ${id} timed out after ${formatMs(ms)}`,
      (signal) => recoverWork(before, call, signal),
    ).finally(() => {
      recovering.delete(id);
      inflight.delete(finished);
    });
    // A graceful stop waits for it like for a transition; its outcome is the caller's.
    const finished = work.then(() => {}, () => {});
    inflight.set(finished, id);
    return await work;
  }

  async function recoverWork(
    before: MachineRecord,
    call: RecoverCall,
    signal: AbortSignal,
  ): Promise<RecoverResult> {
    const { machineId: id, action } = call;
    const host = await backend.inspect({
      machineId: id,
      hostRef: before.hostRef,
      instanceType: before.instanceType,
      zone: before.zone,
    }, signal);
    let plan: string;
    if (action === "adopt") {
      if (host === null) throw refused(`cannot adopt ${id}: no VM carries its marker`);
      if (host.problems.length > 0) {
        throw refused(`cannot adopt ${id} (${host.summary}): ${host.problems.join("; ")}`);
      }
      plan = `adopt ${host.summary} as ${id}, IDLE`;
    } else {
      const rest = before.orphan
        ? `remove ${id} from the inventory (it has no slot)`
        : `return ${id} to SPECULATIVE`;
      plan = host === null
        ? `no VM carries its marker (nothing to destroy); ${rest}`
        : `stop and destroy ${host.summary}; ${rest}`;
    }
    if (!call.apply) return { plan, host, before, after: null, applied: false };
    if (action === "destroy") {
      const target = host?.hostRef ?? before.hostRef;
      if (target !== "") await backend.delete({ machineId: id, hostRef: target }, signal);
    }
    if (closed) {
      throw new KitError(Code.Unavailable, `the provider stopped during the recovery of ${id}`);
    }
    // Nothing but reconcile (its host ref) touches a FAILED machine meanwhile.
    const now = fleet.get(id);
    if (!now || now.state !== State.Failed) {
      throw new KitError(Code.Internal, `machine ${id} changed during its recovery; look again`);
    }
    let after: MachineRecord | null;
    if (action === "adopt") {
      after = { ...unbound(now), state: State.Idle, hostRef: host!.hostRef, lastError: "" };
      fleet.put(after);
    } else if (now.orphan) {
      after = null;
      fleet.remove(id);
    } else {
      after = { ...unbound(now), state: State.Speculative, hostRef: "", lastError: "" };
      fleet.put(after);
    }
    log.info("recover {machineId}: {action} by an operator: {plan}", {
      audit: true,
      machineId: id,
      action,
      plan,
      was: before.lastError,
      hostRef: host?.hostRef ?? before.hostRef,
      to: after ? STATE_NAMES[after.state] : "removed",
    });
    await awaitCommit();
    return { plan, host, before, after, applied: true };
  }

  function refused(message: string): KitError {
    return new KitError(Code.FailedPrecondition, message);
  }

  // ---- an online copy of the state -----------------------------------------

  async function backup(target: StateStore): Promise<BackupResult> {
    if ((await target.load()) !== null) throw new Error("the backup target already holds a state");
    // One synchronous step: everything as it is at this instant.
    const machines = fleet.select({ states: [], maxResults: 0 });
    const marks = fences.entries();
    const revision = fleet.revision;
    // Written as a new store's first state: all or nothing, like a new fleet.
    await target.writeFirst({ machines, fences: marks, rev: revision });
    return { machines: machines.length, fences: marks.length, revision };
  }

  // ---- stopping ------------------------------------------------------------

  async function finish(signal: AbortSignal): Promise<string[]> {
    finishing = true;
    // Every transition accepted so far is in `inflight` (accept is synchronous).
    while (inflight.size > 0 && !signal.aborted) {
      const aborted = Promise.withResolvers<void>();
      const onAbort = () => aborted.resolve();
      signal.addEventListener("abort", onAbort, { once: true });
      await Promise.race([Promise.allSettled([...inflight.keys()]), aborted.promise]);
      signal.removeEventListener("abort", onAbort);
    }
    return [...inflight.values()];
  }

  // ---- the kit -----------------------------------------------------------

  return {
    get size() {
      return fleet.size;
    },
    capacityChange,

    create: (call) => answer(() => accept("create", call)),
    configure: (call) => answer(() => accept("configure", call)),
    drain: (call) => answer(() => accept("drain", call)),
    delete: (call) => answer(() => accept("delete", call)),

    get: (id) =>
      read((view) => {
        checkId(id, "id");
        const m = view.get(id);
        if (!m) throw new KitError(Code.NotFound, `machine ${id} not found`);
        return m;
      }),

    list: (q) => read((view) => ({ machines: view.select(q), revision: view.revision })),

    async reconcile(signal) {
      refuseWhileFinishing();
      const since = fleet.revision;
      const vms = await backend.describe(signal);
      return await answer(() => {
        const plan = planReconcile(
          provider,
          vms,
          (id) => fleet.get(id),
          (id) => (fleet.modifiedAt(id) ?? 0) > since,
        );
        for (const m of plan.put) fleet.put(m);
        for (const f of plan.failedHosts) {
          log.warn(
            "FAILED machine {machineId} still has its VM {hostRef} on the substrate; nothing " +
              "was destroyed: recover it (bigfleet-proxmox machines recover)",
            { machineId: f.id, hostRef: f.hostRef, cloning: f.cloning },
          );
        }
        for (const r of plan.rejoined) {
          log.warn(
            "SPECULATIVE machine {machineId} has a VM {hostRef} the state did not know (an " +
              "older state restored?): it rejoins its slot IDLE",
            { machineId: r.id, hostRef: r.hostRef },
          );
        }
        return {
          changed: plan.followed + plan.failedHosts.length,
          orphans: plan.orphans,
          rejoined: plan.rejoined.length,
        };
      });
    },

    get running() {
      return inflight.size;
    },

    countFailed() {
      const failed = fleet.select({ states: [State.Failed], maxResults: 0 });
      const withHost = failed.filter((m) => m.hostRef !== "").length;
      return { withHost, withoutHost: failed.length - withHost };
    },

    recover,
    backup,

    finish,

    async close(waitMs = 0) {
      if (waitMs > 0 && inflight.size > 0) {
        log.info("waiting up to {ms} ms for {count} running transitions", {
          ms: waitMs,
          count: inflight.size,
        });
        const ac = new AbortController();
        const timer = setTimeout(() => ac.abort(), waitMs);
        await finish(ac.signal);
        clearTimeout(timer);
      }
      finishing = true;
      closed = true;
      // A commit that cannot land is the store's to report: its close logs what stays uncommitted.
      await store.durable().catch(() => {});
      await store.close();
    },
  };
}

/** The record without its cluster binding. */
function unbound(m: MachineRecord): MachineRecord {
  return { ...m, cluster: "", shardMetadata: NO_PAIRS };
}
