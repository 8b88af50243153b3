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
import type { Backend, HostedMachine } from "./backend.ts";
import { Code, KitError } from "./errors.ts";
import { formatMs, withDeadline } from "./deadline.ts";
import { createFenceTable } from "./fence.ts";
import type { Token } from "./fence.ts";
import { openFleet } from "./fleet.ts";
import type { FleetView, Selection } from "./fleet.ts";
import { bootInventory, orphanId, orphanMachine } from "./inventory.ts";
import { describeChange } from "./capacity.ts";
import { EDGES, NO_PAIRS, State, STATE_NAMES } from "./model.ts";
import type { MachineRecord, OpKind, Pairs, Slot } from "./model.ts";
import type { StateStore } from "./store.ts";

export interface Timeouts {
  create: number;
  configure: number;
  drain: number;
  delete: number;
}

export interface KitOptions {
  provider: string;
  backend: Backend;
  store: StateStore;
  slots: readonly Slot[];
  /** Milliseconds per transition kind; defaults 8m/8m/15m/5m (docs/design.md#transitions-and-timeouts). */
  timeouts?: Partial<Timeouts>;
  /** Largest shard_metadata (keys + values, UTF-8 bytes) accepted. */
  maxMetadataBytes?: number;
}

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
  changed: number;
  orphans: number;
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
  /** One pass of substrate refresh: never touches state, binding or last_error. */
  reconcile(signal: AbortSignal): Promise<ReconcileResult>;
  /**
   * Give running transitions up to `waitMs` to finish, then stop reacting to
   * completions and flush the store. Anything still running comes back FAILED
   * after a restart, as the contract requires.
   */
  close(waitMs?: number): Promise<void>;
}

export const DEFAULT_TIMEOUTS: Timeouts = {
  create: 8 * 60_000,
  configure: 8 * 60_000,
  drain: 15 * 60_000,
  delete: 5 * 60_000,
};

const MAX_ID_BYTES = 512;
const MAX_ERROR_CHARS = 4096;
const DEFAULT_MAX_METADATA = 8 * 1024 * 1024;
const utf8 = new TextEncoder();
const log = getLogger(["bigfleet", "kit"]);

export async function startKit(opts: KitOptions): Promise<Kit> {
  const { backend, store, provider } = opts;
  const timeouts: Timeouts = { ...DEFAULT_TIMEOUTS, ...opts.timeouts };
  const maxMetadata = opts.maxMetadataBytes ?? DEFAULT_MAX_METADATA;

  // ---- boot: reload, or build the first inventory -------------------------
  const boot = await bootInventory(store, backend, provider, opts.slots);
  const fences = createFenceTable(store, boot.fences);
  // Written by the fleet and committed: a new fleet whole, a restored one's changes in one batch.
  const fleet = await openFleet(store, boot);
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
      "slot {id} now names {now} but the machine is {was}: left as it is (delete it to re-create)",
      { ...m },
    );
  }

  let closed = false;
  /** Background transitions still running; close() may wait for them. */
  const inflight = new Set<Promise<void>>();
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
   * position. On a legal start
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
    const opId = `op-${bootId}-${++opCounter}`;
    const via: MachineRecord = {
      ...m,
      state: edge.via,
      lastError: "",
      ops: { ...m.ops, [kind]: opId },
    };
    const entered = rule.enter ? rule.enter(via, call) : via;
    fleet.put(entered);
    const ms = timeouts[kind];
    const finished: Promise<void> = withDeadline(
      ms,
      `${kind} timed out after ${formatMs(ms)}`,
      (signal) => rule.work(entered, call, opId, signal),
    ).then(
      (patch) => complete(kind, entered.id, opId, patch, null),
      (err) => complete(kind, entered.id, opId, {}, err),
    ).finally(() => inflight.delete(finished));
    inflight.add(finished);
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
      log.debug("discarding stale {kind} completion for {id}", { kind, id, opId });
      return;
    }
    if (err !== null) {
      const message = err instanceof Error ? err.message : String(err);
      const lastError = (message.startsWith(kind) ? message : `${kind} failed: ${message}`)
        .slice(0, MAX_ERROR_CHARS);
      log.warn("{kind} of {id} failed: {error}", { kind, id, opId, error: lastError });
      fleet.put({ ...m, state: State.Failed, lastError });
      return;
    }
    const landed: MachineRecord = { ...m, ...patch, state: edge.to };
    const done = RULES[kind].done;
    const next = done ? done(landed) : landed;
    if (next === null) fleet.remove(id);
    else fleet.put(next);
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
      const vms = await backend.describe(signal);
      let changed = 0;
      let orphans = 0;
      await answer(() => {
        for (const vm of vms) {
          const id = orphanId(provider, vm);
          const m = fleet.get(id);
          if (!m) {
            // A host still being created may be a retried Create's of ours: wait.
            if (vm.cloning || closed) continue;
            fleet.put(orphanMachine(provider, vm));
            orphans++;
            continue;
          }
          // Follow a host that moved (its backend names it anew); nothing else is touched.
          const stable = m.state === State.Idle || m.state === State.Configured;
          if (stable && m.hostRef !== "" && m.hostRef !== vm.hostRef && !vm.cloning) {
            fleet.put({ ...m, hostRef: vm.hostRef });
            changed++;
          }
        }
      });
      return { changed, orphans };
    },

    async close(waitMs = 0) {
      if (waitMs > 0 && inflight.size > 0) {
        log.info("waiting up to {ms} ms for {count} running transitions", {
          ms: waitMs,
          count: inflight.size,
        });
        let timer: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([
          Promise.allSettled([...inflight]),
          new Promise((resolve) => timer = setTimeout(resolve, waitMs)),
        ]);
        clearTimeout(timer);
      }
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
