// List, revision & pagination, B901–B909.

import assert from "node:assert/strict";
import {
  assertNoDuplicates,
  assertOk,
  bytesEqual,
  type Harness,
  hex,
  type Machine,
  MachineState as St,
  outcome,
  sleep,
  STABLE_STATES,
  stateName,
} from "../../harness/mod.ts";
import type { Behavior } from "./behavior.ts";

const ALL_STATES = [1, 2, 3, 4, 5, 6, 7, 8];
const ids = (ms: Machine[]) => ms.map((m) => m.id);
const concat = (...parts: (Uint8Array | number[])[]) => {
  const out: number[] = [];
  for (const p of parts) out.push(...p);
  return new Uint8Array(out);
};

async function revision(h: Harness): Promise<Uint8Array> {
  return (await h.list()).revision;
}

export const list: Behavior[] = [
  {
    id: "B901",
    title: "state filters return only matching states, multi-state equals the union",
    async run(h) {
      for (const s of ALL_STATES) {
        const l = await h.list({ states: [s] });
        for (const m of l.machines) {
          assert.equal(m.state, s, `List(${stateName(s)}) returned ${stateName(m.state)}`);
        }
        assertNoDuplicates(ids(l.machines), `List(${stateName(s)})`);
      }
      await h.walkToIdle();
      await h.walkToConfigured("conf-b901");
      const want: number[] = [St.SPECULATIVE, St.IDLE, St.CONFIGURED];
      const multi = await h.list({ states: want });
      for (const m of multi.machines) {
        assert.ok(want.includes(m.state), `multi-state List returned ${stateName(m.state)}`);
      }
      assertNoDuplicates(ids(multi.machines), "multi-state List");
      const union = new Set<string>();
      for (const s of want) {
        for (const m of (await h.list({ states: [s] })).machines) union.add(m.id);
      }
      const multiIds = new Set(ids(multi.machines));
      for (const id of union) {
        if (multiIds.has(id)) continue;
        const g = await h.get(id); // forgiven only if it has left the requested states since
        assert.ok(
          !want.includes(g.state),
          `${id} (${stateName(g.state)}) missing from the multi-state List`,
        );
      }
      for (const id of multiIds) {
        assert.ok(union.has(id), `${id} in the multi-state List but in no single-state List`);
      }
    },
  },
  {
    id: "B902",
    title: "max_results caps the page; 0 means no cap",
    async run(h) {
      const full = await h.list();
      assert.ok(full.machines.length > 0, "empty List");
      assertNoDuplicates(ids(full.machines), "full List");
      const all = new Set(ids(full.machines));
      for (const n of [1, 2, 3]) {
        const l = await h.list({ max_results: n });
        assert.ok(l.machines.length <= n, `max_results=${n} returned ${l.machines.length}`);
        if (all.size > n) assert.ok(l.machines.length >= 1, `max_results=${n} returned nothing`);
        assertNoDuplicates(ids(l.machines), `max_results=${n}`);
        for (const m of l.machines) assert.ok(all.has(m.id), `${m.id} not in the full List`);
      }
      const zero = await h.list({ max_results: 0 });
      assert.equal(zero.machines.length, full.machines.length, "max_results=0 must not cap");
    },
  },
  {
    id: "B903",
    title: "List(since=r0) after a walk contains the walked machine",
    async run(h) {
      await h.requireCapabilities({ sinceRevision: true });
      const r0 = await revision(h);
      assert.ok(r0.length > 0, "empty revision");
      const w = await h.walkToIdle();
      const r1 = await revision(h);
      assert.ok(!bytesEqual(r0, r1), "revision did not change across a walk");
      const d = await h.list({ since_revision: r0 });
      assertNoDuplicates(ids(d.machines), "delta");
      assert.ok(ids(d.machines).includes(w.id), "walked machine missing from the delta");
    },
  },
  {
    id: "B904",
    title: "List(since=head) with nothing in between is empty",
    async run(h) {
      await h.requireCapabilities({ sinceRevision: true });
      const r = await revision(h);
      const d = await h.list({ since_revision: r });
      assert.equal(d.machines.length, 0, `delta since head has ${d.machines.length} machines`);
    },
  },
  {
    id: "B905",
    title: "every cursor's delta holds every machine mutated after it",
    async run(h) {
      await h.requireCapabilities({ sinceRevision: true });
      const cursors: Uint8Array[] = [await revision(h)];
      const walked: string[] = [];
      for (let i = 0; i < 4; i++) {
        walked.push((await h.walkToIdle()).id);
        const r = await revision(h);
        assert.ok(!bytesEqual(r, cursors.at(-1)!), `round ${i}: revision did not change`);
        cursors.push(r);
      }
      for (let k = 0; k < cursors.length; k++) {
        const d = new Set(ids((await h.list({ since_revision: cursors[k] })).machines));
        for (const id of walked.slice(k)) assert.ok(d.has(id), `cursor ${k}: ${id} missing`);
      }
    },
  },
  {
    id: "B906",
    title: "unusable cursors return the full fleet without error",
    async run(h) {
      const full = new Set(ids((await h.list()).machines));
      const cursors: [string, Uint8Array | undefined][] = [
        ["unset", undefined],
        ["zero-length", new Uint8Array()],
        ["not-a-real-cursor", new TextEncoder().encode("not-a-real-cursor")],
        ["00 ff 10 42 7f", new Uint8Array([0x00, 0xff, 0x10, 0x42, 0x7f])],
        ["4096 × de", new Uint8Array(4096).fill(0xde)],
      ];
      for (const [name, c] of cursors) {
        const l = assertOk(await outcome(h.list({ since_revision: c })), `cursor ${name}`);
        assertNoDuplicates(ids(l.machines), `cursor ${name}`);
        const got = new Set(ids(l.machines));
        for (const id of full) {
          assert.ok(got.has(id), `cursor ${name}: ${id} missing (${got.size}/${full.size})`);
        }
      }
    },
  },
  {
    id: "B907",
    title: "paging a delta with max_results 2 loses nothing",
    async run(h) {
      await h.requireCapabilities({ sinceRevision: true });
      const base = await revision(h);
      const five: string[] = [];
      for (let i = 0; i < 5; i++) five.push((await h.walkToIdle()).id);
      const delta = await h.list({ since_revision: base });
      assertNoDuplicates(ids(delta.machines), "delta");
      const deltaIds = new Set(ids(delta.machines));
      for (const id of five) assert.ok(deltaIds.has(id), `${id} missing from the delta`);
      const page0 = await h.list({ since_revision: base, max_results: 2 });
      assert.ok(page0.machines.length <= 2, `page0 has ${page0.machines.length}`);
      for (const m of page0.machines) {
        assert.ok(deltaIds.has(m.id), `page0 ${m.id} outside the delta`);
      }
      const seen = new Set(ids(page0.machines));
      const page1 = await h.list({ since_revision: page0.revision, max_results: 2 });
      for (const m of page1.machines) {
        assert.ok(!seen.has(m.id), `page1 repeats ${m.id} from page0`);
      }
      if (page1.machines.filter((m) => deltaIds.has(m.id)).length === 0) return; // head-echo cursor
      let cursor = page0.revision;
      for (let p = 0; p < 64; p++) {
        const page = await h.list({ since_revision: cursor, max_results: 2 });
        if (page.machines.length === 0) break;
        for (const m of page.machines) seen.add(m.id);
        cursor = page.revision;
      }
      for (const id of five) assert.ok(seen.has(id), `${id} never seen while threading the cursor`);
    },
  },
  {
    id: "B908",
    title: "with no mutation, List(since=anchor) stays empty for 750 ms",
    async run(h) {
      await h.requireCapabilities({ sinceRevision: true });
      const anchor = await revision(h);
      const end = Date.now() + 750;
      while (Date.now() < end) {
        const d = await h.list({ since_revision: anchor });
        assert.equal(
          d.machines.length,
          0,
          `delta since anchor ${hex(anchor)} has ${ids(d.machines).join(",")}`,
        );
        await sleep(50);
      }
    },
  },
  {
    id: "B909",
    title: "mangled cursors return the full fleet; a flipped byte is harmless",
    async run(h) {
      await h.requireCapabilities({ sinceRevision: true });
      const l = await h.list();
      const cursor = l.revision;
      assert.equal(
        (await h.list({ since_revision: cursor })).machines.length,
        0,
        "unchanged cursor",
      );
      const stable = ids(l.machines.filter((m) => STABLE_STATES.includes(m.state)));
      const fleet = new Set(ids(l.machines));
      const enc = new TextEncoder();
      const mangled: [string, Uint8Array][] = [
        ["cursor+'!'", concat(cursor, enc.encode("!"))],
        ["'~'+cursor", concat(enc.encode("~"), cursor)],
        ["cursor+00ff", concat(cursor, [0x00, 0xff])],
      ];
      for (const [name, c] of mangled) {
        const r = assertOk(await outcome(h.list({ since_revision: c })), name);
        const got = new Set(ids(r.machines));
        for (const id of stable) {
          assert.ok(got.has(id), `${name}: ${id} missing (${got.size}/${fleet.size})`);
        }
      }
      const flipped = cursor.slice();
      if (flipped.length > 0) flipped[flipped.length - 1] ^= 0x01;
      const r = assertOk(await outcome(h.list({ since_revision: flipped })), "flipped last byte");
      assertNoDuplicates(ids(r.machines), "flipped last byte");
      for (const m of r.machines) assert.ok(fleet.has(m.id), `flipped: unknown id ${m.id}`);
    },
  },
];
