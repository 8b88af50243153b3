// The HTTP/2 frame guard on its own: preface check, GOAWAY removal, and
// identical output however the bytes are split into chunks.

import assert from "node:assert/strict";
import {
  CLIENT_PREFACE,
  GoawayFilter,
  NO_PREFACE,
  NotHttp2Error,
} from "../../src/server/goaway_filter.ts";
import { concat, frame as frameWithFlags } from "./hostile_clients.ts";

const DATA = 0x0, HEADERS = 0x1, SETTINGS = 0x4, PING = 0x6, GOAWAY = 0x7, WINDOW_UPDATE = 0x8;

function frame(type: number, streamId: number, payload: Uint8Array | number[] = []): Uint8Array {
  return frameWithFlags(type, 0, streamId, new Uint8Array(payload));
}

function goaway(lastStreamId: number, code = 0): Uint8Array {
  const p = new Uint8Array(8);
  new DataView(p.buffer).setUint32(0, lastStreamId);
  new DataView(p.buffer).setUint32(4, code);
  return frame(GOAWAY, 0, p);
}

/** Feed `chunks` through a fresh filter; the concatenated output. */
function run(chunks: Uint8Array[]): { out: Uint8Array; filter: GoawayFilter } {
  const filter = new GoawayFilter();
  const parts: Uint8Array[] = [];
  for (const c of chunks) parts.push(...filter.push(c));
  return { out: concat(parts), filter };
}

function split(bytes: Uint8Array, cuts: number[]): Uint8Array[] {
  const out: Uint8Array[] = [];
  let prev = 0;
  for (const c of [...cuts, bytes.length]) {
    out.push(bytes.subarray(prev, c));
    prev = c;
  }
  return out;
}

const settings = frame(SETTINGS, 0, [0, 3, 0, 0, 0, 100]);
const headers = frame(HEADERS, 1, [0x82, 0x86, 0x84]);
const data = frame(DATA, 1, new Uint8Array(1000).fill(7));
const ping = frame(PING, 0, new Uint8Array(8).fill(1));

Deno.test("h2 guard: preface and ordinary frames pass unchanged, without copying", () => {
  const wire = concat([CLIENT_PREFACE, settings, headers, data, ping]);
  const filter = new GoawayFilter();
  const out = filter.push(wire);
  assert.equal(out.length, 1);
  assert.deepEqual(out[0], wire);
  assert.equal(out[0].buffer, wire.buffer, "a view of the input, not a copy");
  assert.ok(filter.prefaceDone);
  assert.equal(filter.goawaysDropped, 0);
});

Deno.test("h2 guard: GOAWAY frames are removed, whatever their code, the rest kept in order", () => {
  const wire = concat([
    CLIENT_PREFACE,
    settings,
    headers,
    goaway(0),
    data,
    goaway(0x7fffffff, 2),
    frame(GOAWAY, 0, []),
    ping,
  ]);
  const { out, filter } = run([wire]);
  assert.deepEqual(out, concat([CLIENT_PREFACE, settings, headers, data, ping]));
  assert.equal(filter.goawaysDropped, 3);
});

Deno.test("h2 guard: the same output for every split point, and byte by byte", () => {
  const wire = concat([CLIENT_PREFACE, settings, goaway(0), headers, data, goaway(5), ping]);
  const want = concat([CLIENT_PREFACE, settings, headers, data, ping]);
  for (let a = 0; a <= wire.length; a++) {
    assert.deepEqual(run(split(wire, [a])).out, want, `split at ${a}`);
  }
  // Two cuts around the GOAWAY and inside its header.
  const g = CLIENT_PREFACE.length + settings.length;
  for (let a = g - 2; a < g + 12; a++) {
    for (let b = a; b < g + 20; b++) {
      assert.deepEqual(run(split(wire, [a, b])).out, want, `split at ${a}, ${b}`);
    }
  }
  const bytes = [...wire].map((b) => new Uint8Array([b]));
  const { out, filter } = run(bytes);
  assert.deepEqual(out, want);
  assert.equal(filter.goawaysDropped, 2);
});

Deno.test("h2 guard: random frames in random chunks match a frame-by-frame filter", () => {
  let seed = 12345;
  const rnd = (n: number) => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed % n;
  };
  const types = [DATA, HEADERS, SETTINGS, PING, GOAWAY, WINDOW_UPDATE];
  for (let round = 0; round < 200; round++) {
    const frames: Uint8Array[] = [];
    for (let k = 0; k < 1 + rnd(12); k++) {
      const payload = new Uint8Array(rnd(3) === 0 ? rnd(40_000) : rnd(20)).map(() => rnd(256));
      frames.push(frame(types[rnd(types.length)], rnd(9), payload));
    }
    const wire = concat([CLIENT_PREFACE, ...frames]);
    const want = concat([CLIENT_PREFACE, ...frames.filter((f) => f[3] !== GOAWAY)]);
    const cuts = Array.from({ length: rnd(8) }, () => rnd(wire.length + 1)).sort((x, y) => x - y);
    assert.deepEqual(run(split(wire, cuts)).out, want, `round ${round}`);
  }
});

Deno.test("h2 guard: a connection that does not start with the preface is refused", () => {
  const filter = new GoawayFilter();
  assert.deepEqual(filter.push(CLIENT_PREFACE.subarray(0, 10)), [CLIENT_PREFACE.subarray(0, 10)]);
  assert.equal(filter.prefaceDone, false);
  assert.throws(() => filter.push(new TextEncoder().encode("GET / HTTP/1.1\r\n")), NotHttp2Error);
  assert.throws(
    () => new GoawayFilter().push(new TextEncoder().encode("GET / HTTP/1.1\r\n")),
    NotHttp2Error,
  );
  // TLS ClientHello bytes on the plaintext port.
  assert.throws(() => new GoawayFilter().push(new Uint8Array([0x16, 3, 1])), NotHttp2Error);
});

Deno.test("h2 guard, server to client: no preface expected, the server's GOAWAY removed at any split", () => {
  // What a provider sends a client: SETTINGS first, answers, then GOAWAY on a graceful stop.
  const wire = concat([settings, headers, data, goaway(1), ping, goaway(1, 0)]);
  const want = concat([settings, headers, data, ping]);
  for (let a = 0; a <= wire.length; a++) {
    const filter = new GoawayFilter(NO_PREFACE);
    const parts = split(wire, [a]).flatMap((c) => filter.push(c));
    assert.deepEqual(concat(parts), want, `split at ${a}`);
    assert.ok(filter.prefaceDone);
    assert.equal(filter.goawaysDropped, 2);
  }
});
