// Assertions phrased the way the catalog states outcomes (codes, non-FP
// rejections, byte-exact maps), with messages that name what was observed.

import assert from "node:assert/strict";
import type { Outcome } from "./client.ts";
import { Code, codeName, type Machine, stateName } from "./types.ts";

function describe(o: Outcome<unknown>): string {
  return o.ok ? "OK" : `${codeName(o.code)} (${o.code}): ${o.message}`;
}

/** The call succeeded; returns its value. */
export function assertOk<T>(o: Outcome<T>, what: string): T {
  if (!o.ok) assert.fail(`${what}: want OK, got ${describe(o)}`);
  return o.value;
}

/** The call failed with exactly `code`. */
export function assertCode(o: Outcome<unknown>, code: number, what: string): void {
  if (o.code !== code) assert.fail(`${what}: want ${codeName(code)} (${code}), got ${describe(o)}`);
}

/** The call failed with one of `codes`. */
export function assertCodeIn(o: Outcome<unknown>, codes: number[], what: string): void {
  if (!codes.includes(o.code)) {
    assert.fail(`${what}: want one of ${codes.map(codeName).join("/")}, got ${describe(o)}`);
  }
}

/** A "non-FP rejection": must fail, and not with FAILED_PRECONDITION. */
export function assertNonFpRejection(o: Outcome<unknown>, what: string): void {
  if (o.ok) assert.fail(`${what}: want a non-FP rejection, got OK`);
  if (o.code === Code.FAILED_PRECONDITION) {
    assert.fail(`${what}: want a non-FP rejection, got ${describe(o)}`);
  }
}

/** Anything but FAILED_PRECONDITION. */
export function assertNotFp(o: Outcome<unknown>, what: string): void {
  if (!o.ok && o.code === Code.FAILED_PRECONDITION) assert.fail(`${what}: got ${describe(o)}`);
}

export function assertState(m: Machine, state: number, what: string): void {
  if (m.state !== state) {
    assert.fail(
      `${what}: machine ${m.id} want ${stateName(state)}, got ${stateName(m.state)}` +
        (m.last_error ? ` (last_error ${JSON.stringify(m.last_error)})` : ""),
    );
  }
}

/** Exact key/value equality, reporting differences with escapes visible. */
export function assertMapEqual(
  got: Record<string, string> | null | undefined,
  want: Record<string, string> | null | undefined,
  what: string,
): void {
  const g = got ?? {};
  const w = want ?? {};
  const problems: string[] = [];
  for (const k of Object.keys(w)) {
    if (!Object.hasOwn(g, k)) problems.push(`missing ${JSON.stringify(k)}`);
    else if (g[k] !== w[k]) {
      problems.push(`${JSON.stringify(k)}: got ${clip(g[k])}, want ${clip(w[k])}`);
    }
  }
  for (const k of Object.keys(g)) {
    if (!Object.hasOwn(w, k)) problems.push(`extra ${JSON.stringify(k)}`);
  }
  if (problems.length > 0) {
    assert.fail(
      `${what}: map differs (${Object.keys(g).length} keys vs ${Object.keys(w).length} wanted): ` +
        problems.slice(0, 8).join("; "),
    );
  }
}

function clip(s: string): string {
  const j = JSON.stringify(s);
  return j.length > 80 ? `${j.slice(0, 80)}…(${s.length} chars)` : j;
}

export function assertNoDuplicates(ids: readonly string[], what: string): void {
  const seen = new Set<string>();
  for (const id of ids) {
    if (seen.has(id)) assert.fail(`${what}: duplicate id ${id}`);
    seen.add(id);
  }
}

export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export function hex(b: Uint8Array): string {
  return Array.from(b.slice(0, 64), (x) => x.toString(16).padStart(2, "0")).join("") +
    (b.length > 64 ? "…" : "");
}
