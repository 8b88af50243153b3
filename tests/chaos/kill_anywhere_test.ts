// Kill anywhere: the provider on the fake backend with --state runs a mixed
// workload — Creates, Configures with shard_metadata up to 1 MiB, Drains,
// Deletes, Lists, half of the calls fenced — and is SIGKILLed at random
// instants, some of them during its own boot (while it loads, or finishes a
// batch a previous kill cut short). Each life draws its own --fake-delay
// (20–200 ms). After every restart, before any new call:
//
// - nothing is left transitional; a machine whose transition was running is
//   FAILED, naming that transition and the restart;
// - every acknowledged operation is there: a machine shows the outcome of its
//   last acknowledged call (or of the one call in flight at the kill), and an
//   identical replay returns the acknowledged operation id;
// - shard_metadata and cluster are exactly those of the Configure that set
//   them (no torn record, byte for byte, up to 1 MiB);
// - every acknowledged fence mark holds (its token is FAILED_PRECONDITION);
// - the revision is above every revision seen before, and never goes back
//   within a life.
//
// `deno task test` runs BFCHAOS_KILLS=20 (the default); `deno task soak` runs
// it long (bench/RESULTS.md, "Soak"). BFCONF_SEED replays the random choices
// of the test (not the provider's timing).

import assert from "node:assert/strict";
import {
  fakeProviderArgs,
  freePort,
  type Machine,
  MachineState as St,
  outcome,
  ProviderClient,
  type ProviderProcess,
  Rng,
  sleep,
  spawnProvider,
  startProvider,
  stateName,
  tail,
  TRANSITIONAL_STATES,
  waitFor,
} from "../harness/mod.ts";

const KILLS = Number(Deno.env.get("BFCHAOS_KILLS") ?? 20);
/** Enough machines that interrupted (FAILED, terminal) ones never run the pool dry. */
const SEED = Number(Deno.env.get("BFCHAOS_SEED_COUNT") ?? Math.max(256, KILLS * 12));
const WORKERS = 4;
/** Machines bound to a map of 256 KiB or more at once, so a full List stays well under 64 MiB. */
const MAX_BIG_MAPS = 16;
const MIB = 1024 * 1024;
const opts = { sanitizeOps: false, sanitizeResources: false };

type Kind = "create" | "configure" | "drain" | "delete";
const TO: Record<Kind, number> = {
  create: St.IDLE,
  configure: St.CONFIGURED,
  drain: St.IDLE,
  delete: St.SPECULATIVE,
};

/** What the test knows of one machine. */
interface Model {
  id: string;
  worker: number;
  /** Last stable state known committed: seen after a restart, or observed after its call. */
  state: number;
  /** Last acknowledged call, kept across lives until a newer one replaces it. */
  ack?: { kind: Kind; op: string; life: number };
  /** The acknowledged call's outcome was seen (so it was committed). */
  observed: boolean;
  /** Sent in this life, not (yet) acknowledged. */
  inflight?: { kind: Kind; md: number | null };
  /** Seed of the map bound by the last Configure, while bound. */
  md: number | null;
  /** Highest acknowledged fenced token on this machine. */
  fence?: { shard: string; seq: bigint };
  /** Once FAILED: its last_error, which must never change. */
  failed?: string;
}

interface Tally {
  kills: number;
  bootKills: number;
  acks: number;
  replays: number;
  fenceChecks: number;
  maxRevision: bigint;
  largestMap: number;
}

// ---- Maps: derived from a seed, so the test keeps seeds, not megabytes.

function mapSize(seed: number): number {
  // One in eight is big: 256 KiB to 1 MiB.
  return seed % 8 === 0 ? 256 * 1024 + (seed * 7919) % (768 * 1024) : 40 + (seed % 200);
}

function mapOf(seed: number): Record<string, string> {
  const size = mapSize(seed);
  const out: Record<string, string> = {};
  const unit = `${seed}:`;
  for (let i = 0, left = size; left > 0; i++) {
    const n = Math.min(left, 64 * 1024);
    out[`chaos.example/k${i}`] = unit.repeat(Math.ceil(n / unit.length)).slice(0, n);
    left -= n;
  }
  return out;
}

function isBig(seed: number): boolean {
  return mapSize(seed) >= 256 * 1024;
}

/** Machines holding (or about to hold) a big map. */
function bigBound(models: Model[]): number {
  return models.filter((m) =>
    (m.md !== null && isBig(m.md)) || (m.inflight?.md != null && isBig(m.inflight.md))
  ).length;
}

function clusterOf(seed: number): string {
  return `chaos-${seed}`;
}

function revisionOf(bytes: Uint8Array): bigint {
  return BigInt(new TextDecoder().decode(bytes));
}

// ---- One life of workload.

interface Life {
  n: number;
  proc: ProviderProcess;
  dead: boolean;
  clients: ProviderClient[];
  errors: string[];
}

function dial(life: Life): ProviderClient {
  const c = new ProviderClient(life.proc.addr, { maxReceiveBytes: 256 * MIB, deadlineMs: 20_000 });
  life.clients.push(c);
  return c;
}

async function worker(
  life: Life,
  w: number,
  all: Model[],
  rng: Rng,
  counters: { md: number; seq: bigint[] },
  tally: Tally,
) {
  const c = dial(life);
  const shard = `chaos-shard-${w}`;
  const pool = all.filter((m) => m.worker === w);
  while (!life.dead) {
    const ready = pool.filter((m) => !m.failed && !TRANSITIONAL_STATES.includes(m.state));
    if (ready.length === 0) return;
    const m = rng.pick(ready);
    let kind: Kind;
    if (m.state === St.SPECULATIVE) kind = "create";
    else if (m.state === St.CONFIGURED) kind = "drain";
    else kind = rng.float() < 0.8 ? "configure" : "delete";
    let md: number | null = null;
    if (kind === "configure") {
      md = ++counters.md;
      if (isBig(md) && bigBound(all) >= MAX_BIG_MAPS) md = ++counters.md; // the next seed is small
    }
    const fenced = rng.float() < 0.5;
    const token = fenced
      ? { shard_id: shard, shard_epoch: 1n, sequence_number: ++counters.seq[w] }
      : {};
    m.inflight = { kind, md };
    try {
      const ack = await (kind === "create"
        ? c.create({ machine_id: m.id, ...token })
        : kind === "configure"
        ? c.configure({
          machine_id: m.id,
          cluster_id: clusterOf(md!),
          shard_metadata: mapOf(md!),
          bootstrap_blob: new TextEncoder().encode(`# chaos ${md}\n`),
          ...token,
        })
        : kind === "drain"
        ? c.drain({ machine_id: m.id, grace_period_seconds: 0, ...token })
        : c.delete({ machine_id: m.id, ...token }));
      m.ack = { kind, op: ack.operation_id, life: life.n };
      m.observed = false;
      m.inflight = undefined;
      if (kind === "configure") {
        m.md = md;
        tally.largestMap = Math.max(tally.largestMap, mapSize(md!));
      }
      if (fenced) {
        m.fence = { shard, seq: counters.seq[w] };
      }
      tally.acks++;
      // A kill ends the wait with an error (the Get fails), and the life with it.
      await waitFor(`${m.id} to reach ${stateName(TO[kind])}`, async () => {
        const g = await c.get({ id: m.id });
        if (g.state === St.FAILED) {
          throw new Error(`${m.id} went FAILED: ${g.last_error}`);
        }
        return g.state === TO[kind];
      }, 60_000);
      m.state = TO[kind];
      m.observed = true;
      if (kind === "drain" || kind === "delete") {
        m.md = null;
      }
    } catch (e) {
      if (life.dead) return;
      life.errors.push(`worker ${w}, ${kind} ${m.id}: ${e instanceof Error ? e.message : e}`);
      return;
    }
  }
}

/** Lists while the workers run: the revision never goes back within a life either. */
async function lister(life: Life, tally: Tally) {
  const c = dial(life);
  let last = tally.maxRevision;
  while (!life.dead) {
    try {
      const l = await c.list({});
      const rev = revisionOf(l.revision);
      if (rev < last) life.errors.push(`List revision went back from ${last} to ${rev}`);
      last = rev > last ? rev : last;
      tally.maxRevision = last > tally.maxRevision ? last : tally.maxRevision;
      for (let i = 0; i < 4 && !life.dead; i++) {
        await c.list({ states: [St.SPECULATIVE], max_results: 1 });
        await sleep(50);
      }
    } catch (e) {
      if (!life.dead) life.errors.push(`List: ${e instanceof Error ? e.message : e}`);
      return;
    }
  }
}

// ---- After a restart.

function interruptedKind(m: Machine): string | null {
  return m.last_error.match(
    /^(create|configure|drain|delete) transition interrupted by a provider restart/,
  )?.[1] ?? null;
}

/** The machine's binding is exactly the map and cluster of Configure `seed` (or none). */
function assertBound(r: Machine, seed: number | null, what: string) {
  if (seed === null) {
    assert.deepEqual(r.shard_metadata, {}, `${what}: unexpected shard_metadata`);
    assert.equal(r.cluster, "", `${what}: unexpected cluster`);
    return;
  }
  assert.equal(r.cluster, clusterOf(seed), `${what}: cluster`);
  const want = Object.entries(mapOf(seed));
  const ok = want.length === Object.keys(r.shard_metadata).length &&
    want.every(([k, v]) => r.shard_metadata[k] === v);
  assert.ok(ok, `${what}: shard_metadata is not the map of Configure ${seed} (${mapSize(seed)} B)`);
}

async function verify(c: ProviderClient, models: Model[], life: number, tally: Tally) {
  const l = await c.list({});
  const rev = revisionOf(l.revision);
  assert.ok(
    rev > tally.maxRevision,
    `life ${life}: revision ${rev} is not above ${tally.maxRevision}`,
  );
  tally.maxRevision = rev;
  const byId = new Map(l.machines.map((m) => [m.id, m]));
  assert.equal(byId.size, SEED, `life ${life}: ${byId.size} machines, want ${SEED}`);
  for (const m of models) {
    const r = byId.get(m.id);
    const what = `life ${life}: ${m.id} (known ${stateName(m.state)}, ack ${m.ack?.kind ?? "-"}${
      m.observed ? " seen" : ""
    }, in flight ${m.inflight?.kind ?? "-"})`;
    assert.ok(r, `${what}: missing`);
    assert.ok(
      !TRANSITIONAL_STATES.includes(r.state),
      `${what}: ${stateName(r.state)} after a restart`,
    );
    if (m.failed !== undefined) {
      assert.equal(r.state, St.FAILED, `${what}: FAILED must stay FAILED`);
      assert.equal(r.last_error, m.failed, `${what}: last_error changed`);
      assertBound(r, m.md, what);
      continue;
    }
    // Outcomes without the call in flight: the acknowledged one (if not yet seen) or what is known.
    const pendingAck = m.ack && m.ack.life === life - 1 && !m.observed ? m.ack.kind : null;
    const broke = r.state === St.FAILED ? interruptedKind(r) : null;
    if (r.state === St.FAILED) {
      assert.ok(broke, `${what}: FAILED without the restart in last_error: ${r.last_error}`);
    }
    let bound: number | null; // the map that must be bound now
    let replay: Kind | null = null;
    if (m.inflight && (r.state === TO[m.inflight.kind] || broke === m.inflight.kind)) {
      // The call in flight at the kill landed (unacknowledged, which is allowed).
      const k = m.inflight.kind;
      bound = k === "configure" || (k === "drain" && broke === "drain")
        ? (k === "configure" ? m.inflight.md : m.md)
        : null;
      m.ack = undefined;
    } else if (pendingAck) {
      assert.ok(
        r.state === TO[pendingAck] || broke === pendingAck,
        `${what}: acknowledged ${pendingAck} lost: machine is ${
          stateName(r.state)
        } ${r.last_error}`,
      );
      bound = pendingAck === "configure" || (pendingAck === "drain" && broke === "drain")
        ? m.md
        : null;
      if (r.state === TO[pendingAck]) replay = pendingAck;
    } else {
      assert.equal(
        stateName(r.state),
        stateName(m.state),
        `${what}: the state known committed changed (${r.last_error})`,
      );
      bound = m.state === St.CONFIGURED ? m.md : null;
      if (m.ack && r.state === TO[m.ack.kind]) replay = m.ack.kind;
    }
    assertBound(r, bound, what);
    if (replay && m.ack) {
      const o = await outcome(
        replay === "create"
          ? c.create({ machine_id: m.id })
          : replay === "configure"
          ? c.configure({ machine_id: m.id, cluster_id: clusterOf(m.md!) })
          : replay === "drain"
          ? c.drain({ machine_id: m.id, grace_period_seconds: 0 })
          : c.delete({ machine_id: m.id }),
      );
      assert.ok(o.ok, `${what}: replay of ${replay} failed with code ${o.code}`);
      assert.equal(o.value.operation_id, m.ack.op, `${what}: replay of ${replay}: op id`);
      tally.replays++;
    }
    if (m.fence) {
      const o = await outcome(
        c.create({
          machine_id: m.id,
          shard_id: m.fence.shard,
          shard_epoch: 1n,
          sequence_number: m.fence.seq,
        }),
      );
      assert.equal(o.code, 9, `${what}: acknowledged fence (${m.fence.seq}) not held: ${o.code}`);
      tally.fenceChecks++;
    }
    // What the next life starts from.
    m.state = r.state;
    m.inflight = undefined;
    m.observed = true;
    m.md = bound;
    if (r.state === St.FAILED) m.failed = r.last_error;
  }
}

Deno.test({
  name: `[chaos] kill anywhere: ${KILLS} SIGKILLs under a mixed workload lose no acknowledged call`,
  ...opts,
  async fn() {
    const t0 = performance.now();
    const rng = new Rng();
    const dir = await Deno.makeTempDir({ prefix: "bfchaos-kill-" });
    const state = `${dir}/state.kv`;
    const tally: Tally = {
      kills: 0,
      bootKills: 0,
      acks: 0,
      replays: 0,
      fenceChecks: 0,
      maxRevision: -1n,
      largestMap: 0,
    };
    const counters = { md: 0, seq: Array.from({ length: WORKERS }, () => 0n) };
    let models: Model[] = [];
    let bootMs = 1_000;
    let life = 0;
    try {
      while (tally.kills < KILLS) {
        const delay = `${rng.int(20, 200)}ms`;
        const args = fakeProviderArgs({ seed: SEED, state, fakeDelay: delay });
        // One kill in five lands in the boot: loading, or finishing a cut batch.
        if (life > 0 && rng.float() < 0.2) {
          const sp = spawnProvider([`--addr=127.0.0.1:${freePort()}`, ...args]);
          await sleep(rng.int(0, Math.round(bootMs)));
          try {
            sp.child.kill("SIGKILL");
          } catch { /* gone */ }
          const s = await sp.child.status;
          await sp.pumped;
          assert.ok(
            s.signal === "SIGKILL" || s.code === 0,
            `boot exited on its own:\n${tail(sp.stderr())}`,
          );
          tally.kills++;
          tally.bootKills++;
          continue;
        }
        life++;
        const proc = await startProvider({ args, readyPollMs: 20, readyTimeoutMs: 60_000 });
        bootMs = proc.readyMs;
        const l: Life = { n: life, proc, dead: false, clients: [], errors: [] };
        try {
          const c = dial(l);
          if (life === 1) {
            const ids = (await c.list({})).machines.map((m) => m.id).sort();
            models = ids.map((id, i) => ({
              id,
              worker: i % WORKERS,
              state: St.SPECULATIVE,
              observed: true,
              md: null,
            }));
            tally.maxRevision = revisionOf((await c.list({})).revision);
          } else {
            await verify(c, models, life, tally);
          }
          const runs = [lister(l, tally)];
          for (let w = 0; w < WORKERS; w++) {
            runs.push(worker(l, w, models, rng, counters, tally));
          }
          await sleep(rng.int(100, 1_500));
          assert.deepEqual(l.errors, [], `life ${life}: unexpected errors`);
          l.dead = true;
          await proc.stop();
          tally.kills++;
          await Promise.all(runs);
        } finally {
          l.dead = true;
          for (const c of l.clients) c.close();
          await proc.stop();
        }
      }
      // A last start checks what the last kill left.
      life++;
      const proc = await startProvider({
        args: fakeProviderArgs({ seed: SEED, state }),
        readyTimeoutMs: 60_000,
      });
      const c = new ProviderClient(proc.addr, { maxReceiveBytes: 256 * MIB, deadlineMs: 20_000 });
      try {
        await verify(c, models, life, tally);
      } finally {
        c.close();
        await proc.stop();
      }
      const failed = models.filter((m) => m.failed).length;
      console.log(
        `kill anywhere: ${tally.kills} SIGKILLs survived (${tally.bootKills} during boot), ` +
          `${life} lives, ${tally.acks} acknowledged calls, lost 0; ${tally.replays} op-id replays, ` +
          `${tally.fenceChecks} fence checks; largest map ${tally.largestMap} bytes; ` +
          `${failed}/${SEED} machines FAILED by interruption; ` +
          `${Math.round((performance.now() - t0) / 1000)} s`,
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
