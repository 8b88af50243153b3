// The lifecycle kit: every obligation of the CapacityProvider contract that is
// not about the substrate. Fencing, idempotency, the state machine, async
// dispatch with timeouts, the List cursor and durable state live here; the
// Backend only makes, bootstraps, drains, destroys and describes hosts. The
// rules, and which module holds each: docs/design.md.
//
// startKit assembles the parts: boot (boot.ts), the fleet and its fence marks,
// answers that wait for durability (answers.ts), the dispatch of lifecycle
// calls (dispatch.ts, rules.ts), recovery (recover.ts), reconcile
// (reconcile.ts) and the background work a stop waits for (inflight.ts).

import { getLogger } from "@logtape/logtape";
import { createAnswers } from "./answers.ts";
import type { BackupResult, Kit } from "./api.ts";
import type { Backend } from "./backend.ts";
import { bootInventory } from "./boot.ts";
import type { BootInventory } from "./boot.ts";
import { createDispatch } from "./dispatch.ts";
import { Code, KitError } from "./errors.ts";
import { createFenceTable } from "./fence.ts";
import type { FenceTable } from "./fence.ts";
import { openFleet } from "./fleet.ts";
import type { Fleet } from "./fleet.ts";
import { createInflight } from "./inflight.ts";
import { State } from "./model.ts";
import type { Slot } from "./model.ts";
import { reconcilePass } from "./reconcile.ts";
import { createRecovery } from "./recover.ts";
import { checkId, createRules } from "./rules.ts";
import { describeChange } from "./slot_changes.ts";
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

const DEFAULT_MAX_METADATA = 8 * 1024 * 1024;
const log = getLogger(["bigfleet", "kit"]);

export async function startKit(opts: KitOptions): Promise<Kit> {
  const { backend, store, provider } = opts;
  const timeouts = withDefaultTimeouts(opts.timeouts);

  // 1. Boot: reload the fleet, or build the first inventory (committed while the listener opens).
  const boot = await bootInventory(store, backend, provider, opts.slots);
  const fences = createFenceTable(store, boot.fences);
  const fleet = await openFleet(store, boot, opts.observer?.machineChanged);
  const capacityChange = boot.capacity ? describeChange(boot.capacity) : null;
  logBoot(boot, fleet, store, capacityChange);
  if (!boot.restored) reportFirstCommit(store, fleet.size);

  // 2. The parts every call goes through.
  const answers = createAnswers(store, fleet);
  const inflight = createInflight();
  const accept = createDispatch({
    rules: createRules(backend, opts.maxMetadataBytes ?? DEFAULT_MAX_METADATA),
    fleet,
    fences,
    transitions: createTransitionLog(opts.observer),
    timeouts,
    inflight,
    closed: () => answers.closed,
  });
  const recover = createRecovery({ backend, fleet, answers, inflight, timeouts });

  async function finish(signal: AbortSignal): Promise<string[]> {
    answers.finishing();
    // Every transition accepted so far is tracked (accept is synchronous).
    return await inflight.settled(signal);
  }

  // 3. The kit: its RPCs, the operator's calls, and what the process uses from boot to stop.
  return {
    create: (call) => answers.answer(() => accept("create", call)),
    configure: (call) => answers.answer(() => accept("configure", call)),
    drain: (call) => answers.answer(() => accept("drain", call)),
    delete: (call) => answers.answer(() => accept("delete", call)),
    get: (id) =>
      answers.read((view) => {
        checkId(id, "id");
        const m = view.get(id);
        if (!m) throw new KitError(Code.NotFound, `machine ${id} not found`);
        return m;
      }),
    list: (q) => answers.read((view) => ({ machines: view.select(q), revision: view.revision })),

    recover,
    backup: (target) => backup(fleet, fences, target),

    get size() {
      return fleet.size;
    },
    capacityChange,
    reconcile: (signal) => reconcilePass({ provider, backend, fleet, answers }, signal),
    get running() {
      return inflight.size;
    },
    countFailed() {
      const failed = fleet.select({ states: [State.Failed], maxResults: 0 });
      const withHost = failed.filter((m) => m.hostRef !== "").length;
      return { withHost, withoutHost: failed.length - withHost };
    },
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
      answers.finishing();
      answers.close();
      // A commit that cannot land is the store's to report: its close logs what stays uncommitted.
      await store.durable().catch(() => {});
      await store.close();
    },
  };
}

/** A new fleet's first state commits in the background (fleet.ts openFleet): say when it has landed. */
function reportFirstCommit(store: StateStore, machines: number): void {
  const t0 = performance.now();
  store.durable().then(
    () =>
      log.info("first state committed: {machines} machines in {ms} ms, state {store}", {
        machines,
        ms: Math.round(performance.now() - t0),
        store: store.description,
      }),
    // The store logs a failed commit and retries it; the calls waiting on it are answered by it.
    () => {},
  );
}

function logBoot(
  boot: BootInventory,
  fleet: Fleet,
  store: StateStore,
  capacityChange: string | null,
): void {
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
}

/** An online copy of the state, taken in one synchronous step: everything as it is at one instant. */
async function backup(fleet: Fleet, fences: FenceTable, target: StateStore): Promise<BackupResult> {
  if ((await target.load()) !== null) throw new Error("the backup target already holds a state");
  const machines = fleet.select({ states: [], maxResults: 0 });
  const marks = fences.entries();
  const revision = fleet.revision;
  // Written as a new store's first state: all or nothing, like a new fleet.
  target.handFirst({ machines, fences: marks, rev: revision });
  await target.durable();
  return { machines: machines.length, fences: marks.length, revision };
}
