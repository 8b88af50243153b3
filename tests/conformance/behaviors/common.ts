// Checks several behaviour groups share: burst verdicts and "appears once" lists.

import assert from "node:assert/strict";
import {
  Code,
  codeName,
  type Harness,
  type Outcome,
  type TransitionAck,
} from "../../harness/mod.ts";

/** A burst of identical calls: ≥1 OK, no FP, every OK ack carries one non-empty op id. */
export function oneOpId(results: Outcome<TransitionAck>[], what: string): string {
  const fps = results.filter((r) => !r.ok && r.code === Code.FAILED_PRECONDITION);
  assert.equal(fps.length, 0, `${what}: ${fps.length} calls got FAILED_PRECONDITION`);
  const oks = results.filter((r) => r.ok);
  if (oks.length === 0) {
    const codes = results.map((r) => codeName(r.code)).join(",");
    assert.fail(`${what}: no call succeeded (${codes})`);
  }
  const ids = new Set(oks.map((r) => r.ok ? r.value.operation_id : ""));
  assert.equal(ids.size, 1, `${what}: ${ids.size} distinct operation ids: ${[...ids].join(", ")}`);
  const [id] = ids;
  assert.notEqual(id, "", `${what}: empty operation_id`);
  return id;
}

/** The id appears exactly once in List(state). */
export async function listedOnce(h: Harness, id: string, state: number, what: string) {
  const l = await h.list({ states: [state] });
  const n = l.machines.filter((m) => m.id === id).length;
  assert.equal(n, 1, `${what}: ${id} appears ${n} times in List(${state})`);
}

/** n parallel calls of `fn`. */
export function burst<T>(n: number, fn: (i: number) => Promise<T>): Promise<T[]> {
  return Promise.all(Array.from({ length: n }, (_, i) => fn(i)));
}
