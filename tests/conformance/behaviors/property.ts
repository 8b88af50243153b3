// Property / fuzz, B1201–B1205, driven by the seeded Rng (BFCONF_SEED, default 1).

import assert from "node:assert/strict";
import {
  assertCode,
  assertMapEqual,
  assertNonFpRejection,
  assertNotFp,
  assertOk,
  assertState,
  Code,
  type FenceToken,
  type Harness,
  MachineState as St,
  type Outcome,
  outcome,
  type Rng,
  stateName,
  token,
  type TransitionAck,
  uniqueShardId,
} from "../../harness/mod.ts";
import type { Behavior } from "./behavior.ts";
import { checkOracle } from "./fencing.ts";

/** B1201's token generator around the last accepted mark. */
function b1201Token(rng: Rng, shard: string, mark: FenceToken | undefined): FenceToken {
  if (!mark) return token(shard, rng.int(1, 3), rng.int(1, 3));
  const e = mark.epoch;
  const s = mark.seq;
  const r = (lo: number, hi: number) => BigInt(rng.int(lo, hi));
  let t: [bigint, bigint];
  switch (rng.int(0, 5)) {
    case 0:
      t = [e, s]; // exact replay
      break;
    case 1:
      t = [e, s + r(-2, 2)];
      break;
    case 2:
      t = [e + r(-1, 1), s + r(-2, 2)];
      break;
    case 3:
      t = [e + 1n, r(0, 2)];
      break;
    case 4:
      t = [e, s + r(1, 3)];
      break;
    default:
      t = [r(1, 6), r(0, 7)];
  }
  if (t[0] <= 0n && t[1] <= 0n) t[1] = 1n;
  return token(shard, t[0], t[1]);
}

const RUNE_POOLS: [number, number][] = [
  [0x00, 0x1f], // NUL and C0 controls
  [0x20, 0x7e],
  [0xa0, 0x39f],
  [0x4e00, 0x9fff], // CJK
  [0x1f300, 0x1f64f], // emoji
];

function randomText(rng: Rng, maxRunes: number, pools = RUNE_POOLS): string {
  let s = "";
  const n = rng.int(0, maxRunes);
  for (let i = 0; i < n; i++) {
    const [lo, hi] = rng.pick(pools);
    s += String.fromCodePoint(rng.int(lo, hi));
  }
  return s;
}

const KEY_PREFIXES = ["bigfleet.lucy.sh/", "topology.bigfleet/", "x-shard/", "节点/"];

function randomMap(rng: Rng, entries: number): Record<string, string> {
  const md: Record<string, string> = {};
  for (let i = 0; i < entries; i++) {
    const key = `${rng.pick(KEY_PREFIXES)}${randomText(rng, 6, RUNE_POOLS.slice(1))}-${i}`;
    md[key] = randomText(rng, 23);
  }
  return md;
}

type Kind = "create" | "configure" | "drain" | "delete";
const LEGAL: Record<Kind, [number, number]> = {
  create: [St.SPECULATIVE, St.IDLE],
  configure: [St.IDLE, St.CONFIGURED],
  drain: [St.CONFIGURED, St.IDLE],
  delete: [St.IDLE, St.SPECULATIVE],
};
const AT_TARGET: Record<Kind, number[]> = {
  create: [St.IDLE],
  drain: [St.IDLE],
  configure: [St.CONFIGURED],
  delete: [St.SPECULATIVE],
};

function callKind(
  h: Harness,
  kind: Kind,
  id: string,
  cluster: string,
): Promise<Outcome<TransitionAck>> {
  switch (kind) {
    case "create":
      return outcome(h.create(id));
    case "configure":
      return outcome(h.configure(id, cluster, { k: "v" }));
    case "drain":
      return outcome(h.drain(id, 0));
    case "delete":
      return outcome(h.delete(id));
  }
}

export const property: Behavior[] = [
  {
    id: "B1201",
    title: "240 random Creates on one pair match the lexicographic oracle exactly",
    async run(h) {
      const m = (await h.pickSpeculative()).id;
      const s = uniqueShardId("b1201");
      const rng = h.rng(1201);
      let mark: FenceToken | undefined;
      for (let i = 0; i < 240; i++) {
        const t = b1201Token(rng, s, mark);
        mark = checkOracle(await h.fenced("create", m, t), t, mark, `call ${i}`);
      }
    },
  },
  {
    id: "B1202",
    title: "20 random UTF-8 maps round-trip through Configure, Get and List",
    async run(h) {
      const rng = h.rng(1202);
      const w = await h.walkToIdle();
      for (let i = 0; i < 20; i++) {
        const md = randomMap(rng, i === 0 ? 0 : rng.int(0, 11)); // case 0: the empty map
        const cluster = `conf-b1202-${i}`;
        assertOk(await outcome(h.configure(w.id, cluster, md)), `case ${i}: Configure`);
        await h.mustReach(w.id, St.CONFIGURED);
        const g = await h.get(w.id);
        assert.equal(g.cluster, cluster, `case ${i}: cluster`);
        assertMapEqual(g.shard_metadata, md, `case ${i}: Get`);
        const lm = (await h.list({ states: [St.CONFIGURED] })).machines.find((m) => m.id === w.id);
        assert.ok(lm, `case ${i}: missing from List(CONFIGURED)`);
        assertMapEqual(lm.shard_metadata, md, `case ${i}: List`);
        assertOk(await outcome(h.drain(w.id, 0)), `case ${i}: Drain`);
        const idle = await h.mustReach(w.id, St.IDLE);
        assert.equal(idle.cluster, "", `case ${i}: cluster after Drain`);
        assertMapEqual(idle.shard_metadata, {}, `case ${i}: metadata after Drain`);
      }
    },
  },
  {
    id: "B1203",
    title: "random unfenced RPC walks respect the transition matrix",
    async run(h) {
      const caps = await h.probe();
      const rng = h.rng(1203);
      const kinds: Kind[] = ["create", "configure", "drain", "delete"];
      for (let walk = 0; walk < 5; walk++) {
        const id = (await h.pickSpeculative()).id;
        let state: number = St.SPECULATIVE;
        for (let step = 0; step < 9; step++) {
          const kind = rng.pick(kinds);
          const what = `walk ${walk} step ${step}: ${kind} @${stateName(state)} on ${id}`;
          const r = await callKind(h, kind, id, `conf-b1203-${walk}`);
          if (kind === "delete" && !caps.delete) {
            assertCode(r, Code.UNIMPLEMENTED, what);
            await h.staysIn(id, state, 80);
          } else if (LEGAL[kind][0] === state) {
            assertOk(r, what);
            state = LEGAL[kind][1];
            await h.mustReach(id, state);
          } else if (AT_TARGET[kind].includes(state)) {
            assertNotFp(r, what);
            await h.staysIn(id, state, 80);
          } else {
            assertNonFpRejection(r, what);
            assertState(await h.get(id), state, `${what}: state changed`);
          }
        }
      }
    },
  },
  {
    id: "B1204",
    title: "200 Creates over 4 machines × 3 shards match a per-pair oracle",
    async run(h) {
      const rng = h.rng(1204);
      const ms = (await h.pickNSpeculative(4)).map((m) => m.id);
      const shards = [0, 1, 2].map((i) => uniqueShardId(`b1204-${i}`));
      const marks = new Map<string, FenceToken>();
      for (let i = 0; i < 200; i++) {
        const shard = rng.pick(shards);
        const id = rng.pick(ms);
        const key = `${shard}\x00${id}`;
        const mark = marks.get(key);
        const t = mark
          ? token(
            shard,
            BigInt(Math.max(0, Number(mark.epoch) + rng.int(-1, 1))),
            BigInt(Math.max(-1, Number(mark.seq) + rng.int(-2, 3))),
          )
          : token(shard, rng.int(0, 2), rng.int(-1, 2));
        const next = checkOracle(await h.fenced("create", id, t), t, mark, `call ${i} on ${id}`);
        if (next) marks.set(key, next);
      }
      assertOk(
        await h.fenced("create", ms[0], token(uniqueShardId("b1204-new"), 1, 1)),
        "new shard (1,1)",
      );
    },
  },
  {
    id: "B1205",
    title: "fuzzed request shapes get the documented codes and never FP",
    async run(h) {
      const caps = await h.probe();
      const rng = h.rng(1205);
      const unknown = () => `conformance-b1205-unknown-${rng.u63()}`;
      for (let i = 0; i < 4; i++) {
        assertCode(await outcome(h.create("")), Code.INVALID_ARGUMENT, 'Create("")');
        assertCode(await outcome(h.configure("", "c")), Code.INVALID_ARGUMENT, 'Configure("")');
        assertCode(await outcome(h.drain("", 5)), Code.INVALID_ARGUMENT, 'Drain("")');
        assertCode(await outcome(h.get("")), Code.INVALID_ARGUMENT, 'Get("")');
        if (caps.delete) {
          assertCode(await outcome(h.delete("")), Code.INVALID_ARGUMENT, 'Delete("")');
        }
        assertCode(await outcome(h.get(unknown())), Code.NOT_FOUND, "Get unknown");
        assertCode(await outcome(h.create(unknown())), Code.NOT_FOUND, "Create unknown");
        assertCode(
          await outcome(h.configure(unknown(), "c", { k: "v" })),
          Code.NOT_FOUND,
          "Configure unknown",
        );
        assertCode(await outcome(h.drain(unknown(), 5)), Code.NOT_FOUND, "Drain unknown");
        if (caps.delete) {
          assertCode(await outcome(h.delete(unknown())), Code.NOT_FOUND, "Delete unknown");
        }
        const t = token(uniqueShardId("b1205"), rng.u63() | 1n, rng.u63() | 1n);
        assertCode(await outcome(h.create(unknown(), t)), Code.NOT_FOUND, "fenced Create unknown");
      }
      const c = await h.walkToConfigured("conf-b1205", { k: "v" });
      const grace = -BigInt(rng.int(1, 2 ** 20)) * BigInt(rng.int(1, 2 ** 20));
      assertNotFp(await outcome(h.drain(c.id, grace)), `Drain grace ${grace}`);
      const i1 = await h.walkToIdle();
      const many: Record<string, string> = {};
      const nKeys = rng.int(400, 799);
      for (let k = 0; k < nKeys; k++) many[`x-fuzz/${k}-${rng.u32()}`] = String(rng.u32());
      assertNotFp(
        await outcome(h.configure(i1.id, "conf-b1205-keys", many)),
        `Configure ${nKeys} keys`,
      );
      const i2 = await h.walkToIdle();
      const blob = rng.bytes(rng.int(64 * 1024, 128 * 1024));
      assertNotFp(
        await outcome(h.configure(i2.id, "conf-b1205-blob", {}, undefined, blob)),
        "random blob",
      );
      const sp = await h.pickSpeculative();
      const t = token(uniqueShardId("b1205-real"), 1, rng.u63());
      assertNotFp(await outcome(h.create(sp.id, t)), "Create (1, random) on a real machine");
    },
  },
];
