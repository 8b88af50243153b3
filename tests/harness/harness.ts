// The Go harness's helpers (internal/harness) over the typed client:
// machine acquisition, polling, walks, fencing sessions and the capability probe.

import assert from "node:assert/strict";
import { type DialOptions, type Outcome, outcome, ProviderClient } from "./client.ts";
import { Rng } from "./rand.ts";
import { sleep, waitFor } from "./time.ts";
import { assertOk, bytesEqual } from "./assert.ts";
import {
  Code,
  type FenceToken,
  type Int64,
  type ListFilter,
  type Machine,
  MachineState,
  stateName,
  type TransitionAck,
} from "./types.ts";

/** Timeouts and windows of the Go harness (catalog §1.6). */
export const SETTLE_MS = 15_000;
export const STABILITY_MS = 300;
export const ERR_STABILITY_MS = 250;
export const POLL_MS = 20;
export const FAN_N = 16;
export const CONF_BLOB = new TextEncoder().encode("# conformance\n");
export const FENCED_CLUSTER = "conf-cluster";

let shardCounter = 0;

/** `conf-<prefix>-<unix ns>-<counter>`: unique per run so marks never collide. */
export function uniqueShardId(prefix: string): string {
  const ns = BigInt(Date.now()) * 1_000_000n + BigInt(Math.floor((performance.now() % 1) * 1e6));
  return `conf-${prefix}-${ns}-${++shardCounter}`;
}

export function token(shard: string, epoch: Int64, seq: Int64): FenceToken {
  return { shard, epoch: BigInt(epoch), seq: BigInt(seq) };
}

function tok(t?: FenceToken) {
  return t ? { shard_id: t.shard, shard_epoch: t.epoch, sequence_number: t.seq } : {};
}

export interface Walked {
  id: string;
  createOp: string;
  machine: Machine;
}

export interface WalkedConfigured extends Walked {
  configureOp: string;
}

export interface Capabilities {
  sinceRevision: boolean;
  delete: boolean;
}

export type TraceResult = {
  /** Every observed state, in order, consecutive duplicates removed. */
  states: number[];
  snapshots: Machine[];
  final: Machine;
};

export interface HarnessOptions extends DialOptions {
  seed?: number;
  /** How long a state change may take (default SETTLE_MS; a real Proxmox clone and boot take longer). */
  settleMs?: number;
  /**
   * The provider under test is this repository's: where the catalog lets a
   * provider choose (accept or refuse, show a transitional state or not), a
   * behaviour asserts the choice this one made (docs/design.md) rather than
   * either, so a regression fails.
   */
  ownProvider?: boolean;
}

export class Harness {
  readonly client: ProviderClient;
  readonly #extra: ProviderClient[] = [];

  constructor(readonly addr: string, readonly opts: HarnessOptions = {}) {
    this.client = new ProviderClient(addr, opts);
  }

  /** An extra connection (B406, B501), closed with the harness. */
  dial(o: DialOptions = {}): ProviderClient {
    const c = new ProviderClient(this.addr, { ...this.opts, ...o });
    this.#extra.push(c);
    return c;
  }

  close(): void {
    this.client.close();
    for (const c of this.#extra) c.close();
  }

  rng(salt = 0): Rng {
    return new Rng((this.opts.seed ?? 1) + salt);
  }

  // ---- Requests with the harness defaults (unfenced unless a token is given).

  create(id: string, t?: FenceToken): Promise<TransitionAck> {
    return this.client.create({ machine_id: id, ...tok(t) });
  }

  configure(
    id: string,
    cluster: string,
    md?: Record<string, string>,
    t?: FenceToken,
    blob: Uint8Array = CONF_BLOB,
  ): Promise<TransitionAck> {
    return this.client.configure({
      machine_id: id,
      cluster_id: cluster,
      bootstrap_blob: blob,
      shard_metadata: md,
      ...tok(t),
    });
  }

  drain(id: string, grace: Int64 = 5, t?: FenceToken): Promise<TransitionAck> {
    return this.client.drain({ machine_id: id, grace_period_seconds: grace, ...tok(t) });
  }

  delete(id: string, t?: FenceToken): Promise<TransitionAck> {
    return this.client.delete({ machine_id: id, ...tok(t) });
  }

  get(id: string): Promise<Machine> {
    return this.client.get({ id });
  }

  list(f: ListFilter = {}) {
    return this.client.list(f);
  }

  /** FencedCall payloads: Configure onto conf-cluster with no map, Drain with grace 0. */
  fenced(
    kind: "create" | "configure" | "drain" | "delete",
    id: string,
    t: FenceToken,
  ): Promise<Outcome<TransitionAck>> {
    switch (kind) {
      case "create":
        return outcome(this.create(id, t));
      case "configure":
        return outcome(this.configure(id, FENCED_CLUSTER, undefined, t));
      case "drain":
        return outcome(this.drain(id, 0, t));
      case "delete":
        return outcome(this.delete(id, t));
    }
  }

  // ---- Machine acquisition.

  /** List(SPECULATIVE, max 1)[0]; an empty pool fails the test (we always seed enough). */
  async pickSpeculative(): Promise<Machine> {
    const l = await this.list({ states: [MachineState.SPECULATIVE], max_results: 1 });
    if (l.machines.length === 0) assert.fail("pickSpeculative: no SPECULATIVE machine left");
    return l.machines[0];
  }

  /** n distinct Speculative machines from one List(SPECULATIVE, max n). */
  async pickNSpeculative(n: number): Promise<Machine[]> {
    const l = await this.list({ states: [MachineState.SPECULATIVE], max_results: n });
    const byId = new Map(l.machines.map((m) => [m.id, m]));
    if (byId.size < n) assert.fail(`pickNSpeculative(${n}): only ${byId.size} distinct machines`);
    return [...byId.values()].slice(0, n);
  }

  // ---- Polling.

  /** Poll Get until `state`; fails on timeout, or early on FAILED when FAILED is not wanted. */
  async mustReach(
    id: string,
    state: number,
    timeoutMs = this.opts.settleMs ?? SETTLE_MS,
    pollMs = POLL_MS,
  ): Promise<Machine> {
    let last: Machine | undefined;
    return await waitFor(
      () => `${id} to reach ${stateName(state)} (last ${stateName(last?.state)})`,
      async () => {
        last = await this.get(id);
        if (last.state === state) return last;
        if (last.state === MachineState.FAILED) {
          assert.fail(
            `${id}: want ${stateName(state)}, machine went FAILED (last_error ${
              JSON.stringify(last.last_error)
            })`,
          );
        }
      },
      timeoutMs,
      pollMs,
    );
  }

  /** Poll Get for `windowMs`, failing on the first snapshot `bad` objects to. */
  async #watch(
    id: string,
    windowMs: number,
    pollMs: number,
    bad: (m: Machine) => string | undefined,
  ): Promise<Machine> {
    const deadline = Date.now() + windowMs;
    let last: Machine;
    do {
      last = await this.get(id);
      const why = bad(last);
      if (why) assert.fail(`${id}: ${why} (window ${windowMs} ms)`);
      await sleep(pollMs);
    } while (Date.now() < deadline);
    return last;
  }

  /** The machine reads `state` on every poll for `windowMs`. */
  staysIn(id: string, state: number, windowMs = STABILITY_MS, pollMs = POLL_MS): Promise<Machine> {
    return this.#watch(
      id,
      windowMs,
      pollMs,
      (m) =>
        m.state === state
          ? undefined
          : `want to stay ${stateName(state)}, saw ${stateName(m.state)}`,
    );
  }

  /** The machine never reads any of `states` for `windowMs`. */
  neverReaches(
    id: string,
    states: readonly number[],
    windowMs = STABILITY_MS,
    pollMs = POLL_MS,
  ): Promise<Machine> {
    return this.#watch(
      id,
      windowMs,
      pollMs,
      (m) => states.includes(m.state) ? `must not show ${stateName(m.state)}` : undefined,
    );
  }

  /** 1 ms Get trace until one of `until` (or FAILED); the StateTrace helper. */
  async trace(
    id: string,
    until: readonly number[],
    timeoutMs = this.opts.settleMs ?? SETTLE_MS,
  ): Promise<TraceResult> {
    const states: number[] = [];
    const snapshots: Machine[] = [];
    const final = await waitFor(
      () =>
        `${id}: trace to reach ${until.map(stateName).join("/")}; saw ${
          states.map(stateName).join("→")
        }`,
      async () => {
        const m = await this.get(id);
        snapshots.push(m);
        if (states.at(-1) !== m.state) states.push(m.state);
        return until.includes(m.state) || m.state === MachineState.FAILED ? m : undefined;
      },
      timeoutMs,
      1,
    );
    return { states, snapshots, final };
  }

  // ---- Walks.

  async walkToIdle(): Promise<Walked> {
    const m = await this.pickSpeculative();
    const ack = await this.create(m.id);
    const machine = await this.mustReach(m.id, MachineState.IDLE);
    return { id: m.id, createOp: ack.operation_id, machine };
  }

  async walkToConfigured(cluster: string, md?: Record<string, string>): Promise<WalkedConfigured> {
    const w = await this.walkToIdle();
    const ack = await this.configure(w.id, cluster, md);
    const machine = await this.mustReach(w.id, MachineState.CONFIGURED);
    return { ...w, configureOp: ack.operation_id, machine };
  }

  /** Parallel Creates on n distinct machines, then each IDLE within 30 s. */
  async walkNToIdle(n: number): Promise<Walked[]> {
    const ms = await this.pickNSpeculative(n);
    const acks = await Promise.all(ms.map((m) => this.create(m.id)));
    return await Promise.all(ms.map(async (m, i) => ({
      id: m.id,
      createOp: acks[i].operation_id,
      machine: await this.mustReach(
        m.id,
        MachineState.IDLE,
        Math.max(30_000, this.opts.settleMs ?? 0),
      ),
    })));
  }

  /** H.Probe(): does the revision advance, and is Delete implemented? Costs one walk. */
  async probe(): Promise<Capabilities> {
    const r0 = (await this.list()).revision;
    const w = await this.walkToIdle();
    const r1 = (await this.list()).revision;
    const sinceRevision = r0.length > 0 && !bytesEqual(r0, r1);
    const d = await outcome(this.delete(w.id));
    const del = d.ok || d.code !== Code.UNIMPLEMENTED;
    if (d.ok) await this.mustReach(w.id, MachineState.SPECULATIVE);
    return { sinceRevision, delete: del };
  }

  /** A probe that fails the test when a capability this product must have is missing. */
  async requireCapabilities(need: Partial<Capabilities>): Promise<Capabilities> {
    const caps = await this.probe();
    if (need.delete && !caps.delete) assert.fail("probe: Delete returned UNIMPLEMENTED");
    if (need.sinceRevision && !caps.sinceRevision) {
      assert.fail("probe: the List revision is empty or did not advance across a walk to Idle");
    }
    return caps;
  }

  /** A fresh ShardSession on a unique shard id. */
  session(prefix: string): ShardSession {
    return new ShardSession(this, uniqueShardId(prefix));
  }

  /** Alias of session(), named after the Go harness's ShardSession. */
  shardSession(prefix: string): ShardSession {
    return this.session(prefix);
  }
}

/** ShardSession: epoch 1, seq 1; seq +1 on every call whatever the outcome. */
export class ShardSession {
  epoch = 1n;
  seq = 1n;

  constructor(readonly h: Harness, readonly shard: string) {}

  next(): FenceToken {
    const t = { shard: this.shard, epoch: this.epoch, seq: this.seq };
    this.seq++;
    return t;
  }

  newEpoch(): void {
    this.epoch++;
    this.seq = 1n;
  }

  create(id: string) {
    return this.h.fenced("create", id, this.next());
  }
  configure(id: string) {
    return this.h.fenced("configure", id, this.next());
  }
  drain(id: string) {
    return this.h.fenced("drain", id, this.next());
  }
  delete(id: string) {
    return this.h.fenced("delete", id, this.next());
  }
}

/** An OK ack's non-empty operation id. */
export function opIdOf(o: Outcome<TransitionAck>, what: string): string {
  const ack = assertOk(o, what);
  if (ack.operation_id === "") assert.fail(`${what}: empty operation_id`);
  return ack.operation_id;
}

/** Run `fn` under a total time budget, like a Go test's context timeout. */
export async function withBudget<T>(ms: number, what: string, fn: () => Promise<T>): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const over = new Promise<never>((_, rej) => {
    timer = setTimeout(() => rej(new Error(`${what}: exceeded its ${ms} ms budget`)), ms);
  });
  try {
    return await Promise.race([fn(), over]);
  } finally {
    clearTimeout(timer);
  }
}
