// The one adapter between the in-process kit tests and how a kit is built:
// the Backend seam (call shapes, host descriptions, host refs), the slots
// startKit takes, and the walks that drive a machine through its
// lifecycle. Tests reach the kit only through what this module hands them
// (Kit methods, KitError codes, the StateStore seam), so a change to the
// Backend interface or to startKit's options is absorbed here.
//
// Every backend call is a promise the test settles: `next(kind)` hands over
// the oldest call of that kind (waiting for it if it has not come yet), and
// the test calls `succeed()` / `fail()` on it, or leaves it running. Nothing
// here sleeps.

import { BackendError } from "../../src/kit/backend.ts";
import type {
  AdmitSpec,
  Backend,
  HostInspection,
  ManagedVm,
  SlotSpec,
} from "../../src/kit/backend.ts";
import { startKit } from "../../src/kit/kit.ts";
import type { Ack, Kit } from "../../src/kit/api.ts";
import type { Timeouts } from "../../src/kit/timeouts.ts";
import type { Token } from "../../src/kit/fence.ts";
import type { Pairs, Slot } from "../../src/kit/model.ts";
import { State } from "../../src/kit/model.ts";
import { nextTurn, WAIT_MS, watchedStore, withDeadline } from "./watched_store.ts";
import type { WatchedStore } from "./watched_store.ts";

export type Kind = "create" | "configure" | "drain" | "delete";

/** A host as the substrate describes it, in the kit's terms. */
export interface VmFact {
  /** The machine id recorded on the host; absent when it carries none. */
  machineId?: string;
  /** Opaque to the kit; these tests write `<zone>/<n>`. */
  hostRef: string;
  /** Its create is still running. */
  cloning?: boolean;
}

/** What this substrate lists hosts without a slot as. */
export const ORPHAN_TYPE = "scripted.orphan";

export interface BackendCall {
  readonly kind: Kind;
  readonly machineId: string;
  /** The host the kit handed over ("" for create). */
  readonly hostRef: string;
  /** create only: everything the kit told the backend about the slot. */
  readonly slot: SlotSpec | null;
  /** configure only. */
  readonly clusterId: string;
  readonly bootstrap: Uint8Array | null;
  /** drain only. */
  readonly graceSeconds: bigint | null;
  readonly signal: AbortSignal;
  readonly settled: boolean;
  /** Finish the work; a create lands on `hostRef` (default: a fresh host in the machine's zone). */
  succeed(hostRef?: string): void;
  fail(err: unknown): void;
}

export interface DescribeCall {
  readonly signal: AbortSignal;
  readonly settled: boolean;
  succeed(vms: readonly VmFact[]): void;
  fail(err: unknown): void;
}

type AnyCall = BackendCall | DescribeCall;
type CallKind = Kind | "describe";

export interface ScriptedBackend {
  /** Every lifecycle call the kit made, in order. */
  readonly calls: readonly BackendCall[];
  readonly closed: boolean;
  /** The oldest call of `kind` (for `machineId`, if given) not yet handed out; waits for one. */
  next(kind: Kind, machineId?: string): Promise<BackendCall>;
  nextDescribe(): Promise<DescribeCall>;
  /** Calls not yet settled. */
  open(): AnyCall[];
  /** What `inspect` answers for a machine from now on (null, the default: no host). */
  setInspection(machineId: string, found: HostInspection | null): void;
  /** Admission of Creates from now on (default: none asked, every Create admitted). */
  setAdmission(admit: ((slot: AdmitSpec) => string | null) | null): void;
  /** Every admission the kit asked for, in order. */
  readonly admissions: readonly AdmitSpec[];
}

interface Scripted extends ScriptedBackend {
  backend: Backend;
}

function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

function vmOf(f: VmFact): ManagedVm {
  return {
    machineId: f.machineId ?? "",
    hostRef: f.hostRef,
    zone: f.hostRef.split("/")[0],
    instanceType: ORPHAN_TYPE,
    cloning: f.cloning ?? false,
  };
}

function scriptedBackend(): Scripted {
  const calls: BackendCall[] = [];
  const all: { kind: CallKind; call: AnyCall; taken: boolean }[] = [];
  const waiting: { kind: CallKind; id?: string; take: (c: AnyCall) => void }[] = [];
  let nextHost = 100;
  let closed = false;
  const inspections = new Map<string, HostInspection | null>();
  let admission: ((slot: AdmitSpec) => string | null) | null = null;
  const admissions: AdmitSpec[] = [];

  function arrive(kind: CallKind, call: AnyCall): void {
    const entry = { kind, call, taken: false };
    all.push(entry);
    const w = waiting.findIndex((x) =>
      x.kind === kind && (x.id === undefined || x.id === idOf(call))
    );
    if (w >= 0) {
      entry.taken = true;
      waiting.splice(w, 1)[0].take(call);
    }
  }

  function idOf(c: AnyCall): string | undefined {
    return "machineId" in c ? c.machineId : undefined;
  }

  function take(kind: CallKind, id?: string): Promise<AnyCall> {
    const entry = all.find((e) =>
      e.kind === kind && !e.taken && (id === undefined || idOf(e.call) === id)
    );
    if (entry) {
      entry.taken = true;
      return Promise.resolve(entry.call);
    }
    return withDeadline<AnyCall>(
      (settle) => {
        const waiter = { kind, id, take: settle };
        waiting.push(waiter);
        return () => waiting.splice(waiting.indexOf(waiter), 1);
      },
      () => `the kit made no ${kind} call ${id ?? ""} within ${WAIT_MS} ms`,
    );
  }

  function lifecycle<T>(
    kind: Kind,
    fields: {
      machineId: string;
      hostRef: string;
      slot?: SlotSpec;
      clusterId?: string;
      bootstrap?: Uint8Array;
      graceSeconds?: bigint;
    },
    signal: AbortSignal,
    result: (hostRef: string) => T,
  ): Promise<T> {
    const d = deferred<T>();
    let settled = false;
    const call: BackendCall = {
      kind,
      machineId: fields.machineId,
      hostRef: fields.hostRef,
      slot: fields.slot ?? null,
      clusterId: fields.clusterId ?? "",
      bootstrap: fields.bootstrap ?? null,
      graceSeconds: fields.graceSeconds ?? null,
      signal,
      get settled() {
        return settled;
      },
      succeed(hostRef) {
        settled = true;
        d.resolve(result(hostRef ?? `${fields.slot?.zone ?? "zone"}/${nextHost++}`));
      },
      fail(err) {
        settled = true;
        d.reject(err);
      },
    };
    calls.push(call);
    arrive(kind, call);
    return d.promise;
  }

  const backend: Backend = {
    kind: "scripted",
    create: (slot, signal) =>
      lifecycle(
        "create",
        { machineId: slot.machineId, hostRef: "", slot },
        signal,
        (hostRef) => ({ hostRef }),
      ),
    configure: (m, spec, signal) =>
      lifecycle(
        "configure",
        {
          machineId: m.machineId,
          hostRef: m.hostRef,
          clusterId: spec.clusterId,
          bootstrap: spec.bootstrap,
        },
        signal,
        () => undefined,
      ),
    drain: (m, graceSeconds, signal) =>
      lifecycle(
        "drain",
        { machineId: m.machineId, hostRef: m.hostRef, graceSeconds },
        signal,
        () => undefined,
      ),
    delete: (m, signal) =>
      lifecycle("delete", { machineId: m.machineId, hostRef: m.hostRef }, signal, () => undefined),
    describe(signal) {
      const d = deferred<ManagedVm[]>();
      let settled = false;
      const call: DescribeCall = {
        signal,
        get settled() {
          return settled;
        },
        succeed(vms) {
          settled = true;
          d.resolve(vms.map(vmOf));
        },
        fail(err) {
          settled = true;
          d.reject(err);
        },
      };
      arrive("describe", call);
      return d.promise;
    },
    inspect: (m) => Promise.resolve(inspections.get(m.machineId) ?? null),
    admit(slot) {
      admissions.push(slot);
      return admission === null ? null : admission(slot);
    },
    close() {
      closed = true;
      return Promise.resolve();
    },
  };

  return {
    backend,
    calls,
    get closed() {
      return closed;
    },
    next: (kind, machineId) => take(kind, machineId) as Promise<BackendCall>,
    nextDescribe: () => take("describe") as Promise<DescribeCall>,
    open: () => all.map((e) => e.call).filter((c) => !c.settled),
    setInspection: (id, found) => inspections.set(id, found),
    setAdmission(fn) {
      admission = fn;
    },
    admissions,
  };
}

/** The error a backend reports for a failure the operator must see in last_error. */
export function backendError(message: string): Error {
  return new BackendError(message);
}

// ---- the kit under test ------------------------------------------------------

export interface TestKitOptions {
  /** Number of SPECULATIVE slots, ids m0, m1, … (default 4). */
  machines?: number;
  /** What the substrate holds when the kit boots on an empty store. */
  vms?: readonly VmFact[];
  /** Milliseconds per transition kind. */
  timeouts?: Partial<Timeouts>;
  maxMetadataBytes?: number;
}

export const CONFIGURE_DEFAULTS = {
  clusterId: "c1",
  bootstrap: new TextEncoder().encode("#!/bin/sh\necho hi\n"),
  shardMetadata: [] as Pairs,
};

export const NO_TOKEN: Token = { shardId: "", epoch: 0n, seq: 0n };

export function tok(shardId: string, epoch: bigint | number, seq: bigint | number): Token {
  return { shardId, epoch: BigInt(epoch), seq: BigInt(seq) };
}

export interface TestKit extends AsyncDisposable {
  readonly kit: Kit;
  readonly backend: ScriptedBackend;
  readonly store: WatchedStore;
  /** Slot machine ids, in slot order. */
  readonly ids: string[];
  /** One unfenced lifecycle call with default arguments. */
  call(kind: Kind, id: string, token?: Token): Promise<Ack>;
  /** An unfenced legal call, its backend work finished, and the machine in its target state. */
  step(kind: Kind, id: string): Promise<Ack>;
}

export const TARGET: Record<Kind, State> = {
  create: State.Idle,
  configure: State.Configured,
  drain: State.Idle,
  delete: State.Speculative,
};

export async function startTestKit(opts: TestKitOptions = {}): Promise<TestKit> {
  const scripted = scriptedBackend();
  const store = watchedStore();
  const n = opts.machines ?? 4;
  const slots: Slot[] = Array.from({ length: n }, (_, i) => ({
    id: `m${i}`,
    instanceType: "t.large",
    zone: i % 2 === 0 ? "zone-a" : "zone-b",
    pricePerHour: 0.0368,
    resources: [["cpu", "1"], ["memory", "2Gi"]],
    allocatable: [["cpu", "8"], ["memory", "16Gi"]],
    labels: [],
  }));
  const starting = startKit({
    provider: "test",
    backend: scripted.backend,
    store,
    slots,
    timeouts: opts.timeouts,
    maxMetadataBytes: opts.maxMetadataBytes,
  });
  // An empty store: the kit asks the substrate what it already holds.
  (await scripted.nextDescribe()).succeed(opts.vms ?? []);
  const kit = await starting;

  function call(kind: Kind, id: string, token: Token = NO_TOKEN): Promise<Ack> {
    switch (kind) {
      case "create":
        return kit.create({ machineId: id, token });
      case "configure":
        return kit.configure({ machineId: id, token, ...CONFIGURE_DEFAULTS });
      case "drain":
        return kit.drain({ machineId: id, token, graceSeconds: 5n });
      case "delete":
        return kit.delete({ machineId: id, token });
    }
  }

  return {
    kit,
    backend: scripted,
    store,
    ids: slots.map((s) => s.id),
    call,
    async step(kind, id) {
      const ack = await call(kind, id);
      (await scripted.next(kind, id)).succeed();
      await store.until(id, TARGET[kind]);
      return ack;
    },
    async [Symbol.asyncDispose]() {
      store.release(); // a test that failed while holding commits must still close
      await kit.close();
      // Work still running keeps its deadline timer armed: finish it.
      for (const c of scripted.open()) c.fail(new Error("test over"));
      await nextTurn();
    },
  };
}
