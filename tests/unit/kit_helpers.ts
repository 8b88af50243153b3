// What the in-process kit tests share (kit_*_test.ts): outcomes, rejections,
// snapshots of what a refused call must leave alone. Those tests are the
// CapacityProvider contract in-process: startKit with a memory store and a
// scripted backend (scripted_backend.ts), written from the contract with the
// behaviour ids of the certification program where one applies. Nothing
// sleeps: background work finishes when a test settles its backend call, and
// tests wait on the state store's writes.

import assert from "node:assert/strict";
import { KitError } from "../../src/kit/errors.ts";
import type { Ack } from "../../src/kit/api.ts";
import { State } from "../../src/kit/model.ts";
import type { MachineRecord } from "../../src/kit/model.ts";
import { backendError } from "./scripted_backend.ts";
import type { Kind, TestKit } from "./scripted_backend.ts";
import { nextTurn } from "./watched_store.ts";

export const KINDS: Kind[] = ["create", "configure", "drain", "delete"];
export const enc = new TextEncoder();

export type Outcome = { ok: true; ack: Ack } | { ok: false; code: number; message: string };

export async function outcome(p: Promise<Ack>): Promise<Outcome> {
  try {
    return { ok: true, ack: await p };
  } catch (e) {
    if (!(e instanceof KitError)) throw e;
    return { ok: false, code: e.code, message: e.message };
  }
}

export async function rejects(p: Promise<unknown>, code: number, what: string): Promise<void> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof KitError, `${what}: expected a KitError, got ${e}`);
    assert.equal(e.code, code, `${what}: ${e.message}`);
    return;
  }
  assert.fail(`${what}: expected code ${code}, got OK`);
}

export function describeOutcome(o: Outcome): string {
  return o.ok ? `OK ${o.ack.operationId}` : `code ${o.code} (${o.message})`;
}

export async function state(t: TestKit, id: string): Promise<State> {
  return (await t.kit.get(id)).state;
}

/** A snapshot of everything a rejected call must leave alone. */
export async function untouched(t: TestKit) {
  const before = {
    writes: t.store.writes,
    calls: t.backend.calls.length,
    revision: (await t.kit.list({ states: [], maxResults: 0 })).revision,
  };
  return async (what: string) => {
    await nextTurn(); // background work would have reached the backend by now
    assert.equal(t.store.writes, before.writes, `${what}: nothing may be written`);
    assert.equal(t.backend.calls.length, before.calls, `${what}: no backend work may start`);
    const { revision } = await t.kit.list({ states: [], maxResults: 0 });
    assert.equal(revision, before.revision, `${what}: the revision may not move`);
  };
}

export type Ops = Partial<Record<Kind, string>>;

export async function steps(t: TestKit, id: string, kinds: Kind[]): Promise<Ops> {
  const ops: Ops = {};
  for (const k of kinds) ops[k] = (await t.step(k, id)).operationId;
  return ops;
}

export async function stepsThenHold(
  t: TestKit,
  id: string,
  done: Kind[],
  held: Kind,
): Promise<Ops> {
  const ops = await steps(t, id, done);
  ops[held] = (await t.call(held, id)).operationId;
  await t.backend.next(held, id); // taken and left running
  return ops;
}

export async function stepsThenFail(
  t: TestKit,
  id: string,
  done: Kind[],
  failing: Kind,
): Promise<Ops> {
  const ops = await steps(t, id, done);
  ops[failing] = (await t.call(failing, id)).operationId;
  await failNext(t, failing, id, `${failing} broke`);
  return ops;
}

/** Settles the oldest open call of `kind` with a failure and waits for FAILED. */
export async function failNext(t: TestKit, kind: Kind, id: string, message: string): Promise<void> {
  (await t.backend.next(kind, id)).fail(backendError(message));
  await t.store.until(id, State.Failed);
}

export function ids(ms: readonly MachineRecord[]): string[] {
  return ms.map((m) => m.id).sort();
}
