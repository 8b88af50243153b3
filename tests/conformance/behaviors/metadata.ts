// Metadata store-and-echo, B501–B505.

import assert from "node:assert/strict";
import {
  assertCode,
  assertMapEqual,
  assertOk,
  Code,
  type Harness,
  MachineState as St,
  MIB,
  outcome,
  STABILITY_MS,
} from "../../harness/mod.ts";
import type { Behavior } from "./behavior.ts";

/** B501's 55 keys: NUL in values and keys, C0 controls, U+0085, scripts, empties. */
export function b501Map(): Record<string, string> {
  const md: Record<string, string> = {
    "bigfleet.lucy.sh/assigned-group": "topology.bigfleet/rack\x00gang-7",
    "x-key-with-nul\x00suffix": "nul-in-key",
    "x-c0/controls": "\x00\x01\x02\x1f\x7f",
    "x-c1/nel": "before\u0085after",
    "x-unicode/greek": "Ελληνικά\tκείμενο\n",
    "x-unicode/cjk": "中文字符\t日本語\n",
    "x-unicode/emoji": "🚀🔥👍\t\n",
    "x-empty/value": "",
    "x-trailing/spaces": "value with trailing spaces   ",
    "x-only/nul": "\x00",
  };
  for (let i = 0; i < 45; i++) {
    md[`x-bulk/key-${String(i).padStart(3, "0")}-παδ`] = `v-${i}-\x00-你好🚀`;
  }
  return md;
}

/** B503's ~2 MiB map: 256 keys of 8 KiB values. */
export function b503Map(): Record<string, string> {
  const md: Record<string, string> = {};
  for (let i = 0; i < 256; i++) {
    md[`x-oversize/key-${String(i).padStart(4, "0")}`] = String.fromCharCode(97 + (i % 26)).repeat(
      8192,
    );
  }
  return md;
}

async function listedMap(h: Harness, id: string, client = h.client) {
  const m = (await client.list({ states: [St.CONFIGURED] })).machines.find((x) => x.id === id);
  assert.ok(m, `${id} missing from List(CONFIGURED)`);
  return m;
}

export const metadata: Behavior[] = [
  {
    id: "B501",
    title: "a 55-key hostile map is echoed byte-identically by Get and List",
    async run(h) {
      const md = b501Map();
      assert.equal(Object.keys(md).length, 55);
      const w = await h.walkToIdle();
      assertOk(await outcome(h.configure(w.id, "conf-b501", md)), "Configure");
      await h.mustReach(w.id, St.CONFIGURED);
      for (let i = 0; i < 4; i++) {
        const g = await h.get(w.id);
        assert.equal(Object.keys(g.shard_metadata).length, 55, `Get ${i}: key count`);
        assertMapEqual(g.shard_metadata, md, `Get ${i}`);
      }
      const big = h.dial({ maxReceiveBytes: 128 * MIB });
      assertMapEqual((await listedMap(h, w.id, big)).shard_metadata, md, "List(CONFIGURED)");
    },
  },
  {
    id: "B502",
    title: "Drain clears the old map; a new Configure shows only the new one",
    async run(h) {
      const w = await h.walkToConfigured("conf-b502-old", {
        "old.key/a": "1",
        "old.key/b": "2",
        "old.key/nul": "x\x00y",
      });
      assertOk(await outcome(h.drain(w.id, 5)), "Drain");
      const idle = await h.mustReach(w.id, St.IDLE);
      assertMapEqual(idle.shard_metadata, {}, "after Drain");
      assert.equal(idle.cluster, "");
      const fresh = { "new.key/x": "10", "new.key/y": "20" };
      assertOk(await outcome(h.configure(w.id, "conf-b502-new", fresh)), "Configure new");
      const g = await h.mustReach(w.id, St.CONFIGURED);
      assertMapEqual(g.shard_metadata, fresh, "after the new Configure");
      assert.equal(g.cluster, "conf-b502-new");
    },
  },
  {
    id: "B503",
    title: "a ~2 MiB map is echoed exactly or refused with INVALID_ARGUMENT",
    async run(h) {
      const md = b503Map();
      const w = await h.walkToIdle();
      const r = await outcome(h.configure(w.id, "conf-b503", md));
      if (r.ok) {
        const g = await h.mustReach(w.id, St.CONFIGURED, 30_000);
        assert.equal(Object.keys(g.shard_metadata).length, 256);
        assertMapEqual(g.shard_metadata, md, "Get");
        assertOk(await outcome(h.drain(w.id, 0)), "Drain(0)");
        await h.mustReach(w.id, St.IDLE, 30_000); // keep later 4 MiB Lists small
        return;
      }
      assertCode(r, Code.INVALID_ARGUMENT, "2 MiB Configure");
      const g = await h.staysIn(w.id, St.IDLE, STABILITY_MS);
      assertMapEqual(g.shard_metadata, {}, "after refusal");
    },
  },
  {
    id: "B504",
    title: "the map is visible on every CONFIGURING snapshot",
    async run(h) {
      const md = {
        "b504/early": "must-be-visible-mid-flight",
        "b504/nul": "x\x00y",
        "b504/unicode": "你好🚀",
      };
      const w = await h.walkToIdle();
      assertOk(await outcome(h.configure(w.id, "conf-b504", md)), "Configure");
      const t = await h.trace(w.id, [St.CONFIGURED]);
      for (const s of t.snapshots) {
        if (s.state === St.CONFIGURING) {
          assertMapEqual(s.shard_metadata, md, "CONFIGURING snapshot");
        }
      }
      assert.equal(t.final.state, St.CONFIGURED);
      assertMapEqual(t.final.shard_metadata, md, "CONFIGURED snapshot");
    },
  },
  {
    id: "B505",
    title: "editing the caller's map after the ack changes nothing stored",
    async run(h) {
      const original = { keep: "1", edit: "before", drop: "x" };
      const md: Record<string, string> = { ...original };
      const w = await h.walkToIdle();
      assertOk(await outcome(h.configure(w.id, "conf-b505", md)), "Configure");
      md.edit = "after";
      delete md.drop;
      md.added = "new";
      await h.mustReach(w.id, St.CONFIGURED);
      for (let i = 0; i < 2; i++) {
        assertMapEqual((await h.get(w.id)).shard_metadata, original, `Get ${i}`);
      }
    },
  },
];
