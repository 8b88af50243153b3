// The wire codec (src/server/codec.ts) against the contract's own schema:
// requests are encoded and replies decoded with protobufjs reflection over
// proto/bigfleet/v1alpha1/provider.proto, so field numbers and types come
// from the .proto, not from the codec. Where reflection itself cannot carry
// a value (a map key "__proto__" on a JS object), the bytes are read by
// field number here.

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import protobuf from "protobufjs";
import {
  decodeConfigure,
  decodeCreate,
  decodeDelete,
  decodeDrain,
  DecodeError,
  decodeListFilter,
  decodeMachineRef,
  machineEncoder,
} from "../../src/server/codec.ts";
import { ON_DEMAND, State } from "../../src/kit/model.ts";
import type { MachineRecord, Pairs } from "../../src/kit/model.ts";
import { PROTO_PATH } from "../../src/proto.ts";

const root = protobuf.loadSync(PROTO_PATH);
const T = (name: string) => root.lookupType(`bigfleet.v1alpha1.${name}`);
const MAX = 2n ** 63n - 1n;
const MIN = -(2n ** 63n);
const INT64_EDGES = [MIN, MIN + 1n, -(2n ** 53n) - 1n, -1n, 0n, 1n, 2n ** 53n + 1n, MAX - 1n, MAX];

function encode(type: string, fields: Record<string, unknown>): Uint8Array {
  const t = T(type);
  return t.encode(t.fromObject(fields)).finish();
}

/** Decodes a reply; absent fields stay absent (no defaults). */
function decode(type: string, bytes: Uint8Array): Record<string, unknown> {
  return T(type).toObject(T(type).decode(bytes), {
    longs: String,
    enums: Number,
    bytes: Array,
    defaults: false,
  });
}

/** protobufjs hands out Buffers where the codec may return Uint8Arrays; compare the bytes. */
function u8(b: Uint8Array): Uint8Array {
  return new Uint8Array(b);
}

/** Fields of every wire type that no message in the contract uses. */
function unknownFields(): Uint8Array {
  const w = protobuf.Writer.create();
  w.uint32((90 << 3) | 0).uint64("18446744073709551615");
  w.uint32((91 << 3) | 1).fixed64(7);
  w.uint32((92 << 3) | 2).bytes(new Uint8Array([1, 2, 3, 0xff]));
  w.uint32((93 << 3) | 5).fixed32(9);
  w.uint32((94 << 3) | 2).fork().uint32((1 << 3) | 2).string("nested").ldelim();
  return w.finish();
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** Map entries of field `field` in `bytes`, read by field number, as ordered pairs. */
function rawMap(bytes: Uint8Array, field: number): [string, string][] {
  const out: [string, string][] = [];
  const r = protobuf.Reader.create(bytes);
  while (r.pos < r.len) {
    const tag = r.uint32();
    if (tag >>> 3 !== field || (tag & 7) !== 2) {
      r.skipType(tag & 7);
      continue;
    }
    const e = protobuf.Reader.create(r.bytes());
    let k = "";
    let v = "";
    while (e.pos < e.len) {
      const t = e.uint32();
      if (t >>> 3 === 1) k = e.string();
      else if (t >>> 3 === 2) v = e.string();
      else e.skipType(t & 7);
    }
    out.push([k, v]);
  }
  return out;
}

/** Field numbers present at the top level of `bytes`. */
function topFields(bytes: Uint8Array): Set<number> {
  const seen = new Set<number>();
  const r = protobuf.Reader.create(bytes);
  while (r.pos < r.len) {
    const tag = r.uint32();
    seen.add(tag >>> 3);
    r.skipType(tag & 7);
  }
  return seen;
}

const WEIRD_PAIRS: Pairs = [
  ["__proto__", "not a prototype"],
  ["constructor", "c"],
  ["hasOwnProperty", "h"],
  ["x-key-with-nul\u0000suffix", "rack\u0000gang-7"],
  ["x-empty/value", ""],
  ["", "empty key"],
  ["节点/emoji", "你好🚀\t\n\u0085\u007f"],
];

// ---- requests --------------------------------------------------------------------

Deno.test("codec: int64 tokens and grace decode exactly at every edge", () => {
  for (const v of INT64_EDGES) {
    const s = v.toString();
    const token = { shardId: "s", epoch: v, seq: -v === MAX + 1n ? v : -v };
    const wire = { shardId: "s", shardEpoch: s, sequenceNumber: token.seq.toString() };
    assert.deepEqual(decodeCreate(encode("CreateRequest", { machineId: "m", ...wire })), {
      machineId: "m",
      token,
    });
    assert.deepEqual(
      decodeDelete(encode("DeleteRequest", { machineId: "m", ...wire })).token,
      token,
    );
    assert.deepEqual(
      decodeConfigure(encode("ConfigureRequest", { machineId: "m", clusterId: "c", ...wire }))
        .token,
      token,
    );
    const drain = decodeDrain(
      encode("DrainRequest", { machineId: "m", gracePeriodSeconds: s, ...wire }),
    );
    assert.equal(drain.graceSeconds, v, `grace ${s}`);
    assert.deepEqual(drain.token, token);
  }
});

Deno.test("codec: absent fields decode as the zero token and empty values", () => {
  const none = { shardId: "", epoch: 0n, seq: 0n };
  assert.deepEqual(decodeCreate(new Uint8Array()), { machineId: "", token: none });
  assert.deepEqual(decodeDelete(new Uint8Array()), { machineId: "", token: none });
  assert.deepEqual(decodeDrain(new Uint8Array()), { machineId: "", token: none, graceSeconds: 0n });
  const c = decodeConfigure(new Uint8Array());
  assert.deepEqual(c, {
    machineId: "",
    token: none,
    clusterId: "",
    bootstrap: new Uint8Array(),
    shardMetadata: [],
  });
  assert.equal(decodeMachineRef(new Uint8Array()), "");
  assert.deepEqual(decodeListFilter(new Uint8Array()), {
    states: [],
    maxResults: 0,
    sinceRevision: new Uint8Array(),
  });
});

Deno.test("codec: unknown fields, reserved fields and wrong wire types are skipped", () => {
  const tail = unknownFields();
  const create = encode("CreateRequest", {
    machineId: "m1",
    shardId: "s",
    shardEpoch: "3",
    sequenceNumber: "-7",
  });
  // Field 2 of CreateRequest is reserved (an older request shape used it).
  const reserved = protobuf.Writer.create().uint32((2 << 3) | 2).string("old").finish();
  // machine_id sent as a varint is not a machine id.
  const wrongType = protobuf.Writer.create().uint32((1 << 3) | 0).uint32(5).finish();
  const want = decodeCreate(create);
  assert.deepEqual(decodeCreate(concat(tail, create, reserved, tail)), want);
  assert.deepEqual(decodeCreate(concat(create, wrongType)), want);

  const configure = encode("ConfigureRequest", {
    machineId: "m1",
    clusterId: "c",
    bootstrapBlob: new Uint8Array([0, 1, 2]),
    shardMetadata: { k: "v" },
  });
  const plain = decodeConfigure(configure);
  const noisy = decodeConfigure(concat(tail, configure, tail));
  assert.deepEqual({ ...noisy, bootstrap: u8(noisy.bootstrap) }, {
    ...plain,
    bootstrap: u8(plain.bootstrap),
  });
  assert.deepEqual(u8(plain.bootstrap), new Uint8Array([0, 1, 2]));
  // An unknown field inside a map entry is skipped too.
  const entry = protobuf.Writer.create().uint32((7 << 3) | 2).fork()
    .uint32((1 << 3) | 2).string("k2").uint32((3 << 3) | 0).uint32(1).uint32((2 << 3) | 2).string(
      "v2",
    )
    .ldelim().finish();
  assert.deepEqual(decodeConfigure(concat(configure, entry)).shardMetadata, [["k", "v"], [
    "k2",
    "v2",
  ]]);

  const drain = encode("DrainRequest", { machineId: "m1", gracePeriodSeconds: "30" });
  assert.deepEqual(decodeDrain(concat(drain, tail)), decodeDrain(drain));
  const del = encode("DeleteRequest", { machineId: "m1", shardId: "s" });
  assert.deepEqual(decodeDelete(concat(tail, del)), decodeDelete(del));
  assert.equal(decodeMachineRef(concat(tail, encode("MachineRef", { id: "m9" }), tail)), "m9");
  const list = encode("ListFilter", { states: [1, 3], maxResults: 2 });
  // ListFilter fields 2 and 3 are reserved.
  const listReserved = protobuf.Writer.create().uint32((2 << 3) | 0).uint32(1).uint32((3 << 3) | 2)
    .string("x").finish();
  assert.deepEqual(decodeListFilter(concat(tail, list, listReserved)), decodeListFilter(list));
});

Deno.test("codec: truncated input is an error, not a shorter request", () => {
  const full = encode("CreateRequest", { machineId: "machine-with-a-long-id", shardId: "s" });
  // The server hands the codec Node Buffers (grpc-js); protobufjs reads those
  // with a reader of its own, so both shapes are checked.
  for (const shape of [(b: Uint8Array) => Buffer.from(b), (b: Uint8Array) => new Uint8Array(b)]) {
    const name = shape(new Uint8Array()).constructor.name;
    // Cut inside machine_id: decoding "machine-" as the id would act on another machine.
    assert.throws(
      () => decodeCreate(shape(full.subarray(0, 10))),
      DecodeError,
      `${name}: cut inside a string`,
    );
    assert.throws(
      () => decodeConfigure(shape(new Uint8Array([(7 << 3) | 2, 50, 10, 1]))),
      DecodeError,
      `${name}: cut inside a map entry`,
    );
    assert.throws(
      () => decodeListFilter(shape(new Uint8Array([(5 << 3) | 2, 9, 1]))),
      DecodeError,
      `${name}: cut inside bytes`,
    );
    assert.throws(
      () => decodeListFilter(shape(new Uint8Array([(1 << 3) | 2, 9, 1]))),
      DecodeError,
      `${name}: cut inside packed states`,
    );
    // A wire type protobuf does not have (6) is malformed too.
    assert.throws(() => decodeCreate(shape(new Uint8Array([(9 << 3) | 6, 0]))), DecodeError);
  }
});

Deno.test("codec: Configure's map keeps every key and value byte for byte", () => {
  // Reflection would drop "__proto__" from a JS object when decoding, but it
  // encodes an object's own enumerable keys, which JSON.parse creates.
  const md = JSON.parse(JSON.stringify(Object.fromEntries(WEIRD_PAIRS)));
  assert.ok(Object.keys(md).includes("__proto__"));
  const t = T("ConfigureRequest");
  const bytes = t.encode(
    t.create({
      machineId: "m",
      clusterId: "c",
      bootstrapBlob: new Uint8Array(),
      shardMetadata: md,
    }),
  ).finish();
  const got = decodeConfigure(bytes).shardMetadata;
  assert.deepEqual(new Map(got), new Map(WEIRD_PAIRS));
  assert.equal(got.length, WEIRD_PAIRS.length);
  // Nothing leaked onto Object.prototype.
  assert.equal(({} as Record<string, unknown>)["not a prototype"], undefined);
});

Deno.test("codec: a map entry missing its key or value means the empty string; a repeated key keeps the last", () => {
  const w = protobuf.Writer.create();
  w.uint32((7 << 3) | 2).fork().uint32((1 << 3) | 2).string("only-key").ldelim();
  w.uint32((7 << 3) | 2).fork().uint32((2 << 3) | 2).string("only-value").ldelim();
  w.uint32((7 << 3) | 2).fork().uint32((1 << 3) | 2).string("k").uint32((2 << 3) | 2).string("1")
    .ldelim();
  w.uint32((7 << 3) | 2).fork().uint32((1 << 3) | 2).string("k").uint32((2 << 3) | 2).string("2")
    .ldelim();
  assert.deepEqual(
    new Map(decodeConfigure(w.finish()).shardMetadata),
    new Map([
      ["only-key", ""],
      ["", "only-value"],
      ["k", "2"],
    ]),
  );
});

Deno.test("codec: large maps and a 3 MiB bootstrap round-trip", () => {
  const md: Record<string, string> = {};
  for (let i = 0; i < 10_000; i++) md[`x-bulk/key-${i}-παδ`] = `v-${i}-\u0000-你好🚀`;
  const blob = new Uint8Array(3 * 1024 * 1024);
  for (let i = 0; i < blob.length; i++) blob[i] = 97 + (i % 26);
  const bytes = encode("ConfigureRequest", {
    machineId: "m",
    clusterId: "c",
    bootstrapBlob: blob,
    shardMetadata: md,
  });
  const got = decodeConfigure(bytes);
  assert.equal(got.shardMetadata.length, 10_000);
  assert.deepEqual(Object.fromEntries(got.shardMetadata), md);
  assert.deepEqual(u8(got.bootstrap), blob);
});

Deno.test("codec: ListFilter states packed or not, negative max_results, raw since_revision", () => {
  const packed = encode("ListFilter", {
    states: [1, 3, 5],
    maxResults: -1,
    sinceRevision: new Uint8Array([0, 0xff]),
  });
  const got = decodeListFilter(packed);
  assert.deepEqual(got.states, [1, 3, 5]);
  assert.equal(got.maxResults, -1);
  assert.deepEqual(u8(got.sinceRevision), new Uint8Array([0, 0xff]));
  const unpacked = protobuf.Writer.create();
  for (const s of [2, 8]) unpacked.uint32((1 << 3) | 0).int32(s);
  unpacked.uint32((4 << 3) | 0).int32(1000);
  assert.deepEqual(decodeListFilter(unpacked.finish()).states, [2, 8]);
  assert.equal(decodeListFilter(unpacked.finish()).maxResults, 1000);
  const cursor = new Uint8Array(4096).fill(0xde);
  const decoded = decodeListFilter(encode("ListFilter", { sinceRevision: cursor }));
  assert.deepEqual(u8(decoded.sinceRevision), cursor);
});

// ---- replies ---------------------------------------------------------------------

function record(over: Partial<MachineRecord> = {}): MachineRecord {
  return {
    id: "certify/OnDemand/pve.large/pve-a/000",
    state: State.Speculative,
    hostRef: "",
    instanceType: "pve.large",
    zone: "pve-a",
    capacityType: ON_DEMAND,
    pricePerHour: 0.0368,
    interruptionProbability: 0,
    resources: [],
    allocatable: [],
    labels: [],
    cluster: "",
    shardMetadata: [],
    lastError: "",
    ops: {},
    orphan: false,
    ...over,
  };
}

Deno.test("codec: an unset host, resources and allocatable are left out, not sent empty", () => {
  const bytes = machineEncoder("certify").machine(record());
  const fields = topFields(bytes);
  for (const f of [3, 9, 13]) assert.ok(!fields.has(f), `field ${f} must be absent`);
  const m = decode("Machine", bytes);
  assert.equal(m.host, undefined);
  assert.equal(m.resources, undefined);
  assert.equal(m.allocatable, undefined);
  assert.deepEqual(m, {
    id: "certify/OnDemand/pve.large/pve-a/000",
    state: State.Speculative,
    instanceType: "pve.large",
    zone: "pve-a",
    capacityType: ON_DEMAND,
    pricePerHour: 0.0368,
  });
});

Deno.test("codec: every field of a configured machine decodes as the schema says", () => {
  const rec = record({
    state: State.Configured,
    hostRef: "pve1/101",
    resources: [["cpu", "1"], ["memory", "2Gi"]],
    allocatable: [["cpu", "8"], ["memory", "16Gi"]],
    labels: [["accelerator", ""]],
    cluster: "conf-b806",
    shardMetadata: [["a", "1"], ["empty", ""]],
    interruptionProbability: 0.25,
  });
  const m = decode("Machine", machineEncoder("proxmox-dc1").machine(rec));
  assert.deepEqual(m, {
    id: rec.id,
    state: State.Configured,
    host: { provider: "proxmox-dc1", ref: "pve1/101" },
    instanceType: "pve.large",
    zone: "pve-a",
    capacityType: ON_DEMAND,
    pricePerHour: 0.0368,
    interruptionProbability: 0.25,
    resources: { resources: { cpu: "1", memory: "2Gi" } },
    allocatable: { resources: { cpu: "8", memory: "16Gi" } },
    labels: { accelerator: "" },
    cluster: "conf-b806",
    shardMetadata: { a: "1", empty: "" },
  });
  const failed = decode(
    "Machine",
    machineEncoder("p").machine(
      record({ state: State.Failed, hostRef: "n/1", lastError: "create timed out after 8m0s" }),
    ),
  );
  assert.equal(failed.lastError, "create timed out after 8m0s");
});

Deno.test("codec: shard_metadata and labels go out byte for byte, empty values and odd keys included", () => {
  const bytes = machineEncoder("p").machine(
    record({
      state: State.Configured,
      hostRef: "n/1",
      cluster: "c",
      shardMetadata: WEIRD_PAIRS,
      labels: WEIRD_PAIRS,
    }),
  );
  const md = rawMap(bytes, 15);
  assert.equal(md.length, WEIRD_PAIRS.length);
  assert.deepEqual(new Map(md), new Map(WEIRD_PAIRS));
  assert.deepEqual(new Map(rawMap(bytes, 10)), new Map(WEIRD_PAIRS));
  const large: Pairs = Array.from({ length: 5000 }, (_, i) => [`k${i}`, "v".repeat(i % 50)]);
  const big = machineEncoder("p").machine(record({ shardMetadata: large }));
  assert.deepEqual(rawMap(big, 15), large);
});

Deno.test("codec: ack and list carry the machine bytes; an empty revision is left out", () => {
  const enc = machineEncoder("p");
  const a = record();
  const b = record({ id: "b", state: State.Idle, hostRef: "n/2" });
  const ack = decode("TransitionAck", enc.ack("op-1", b));
  assert.equal(ack.operationId, "op-1");
  assert.deepEqual(ack.machine, decode("Machine", enc.machine(b)));
  const list = decode("MachineList", enc.list([a, b], new TextEncoder().encode("42")));
  assert.deepEqual((list.machines as unknown[]).length, 2);
  assert.deepEqual(list.revision, [...new TextEncoder().encode("42")]);
  assert.ok(!topFields(enc.list([], new Uint8Array())).has(2));
  assert.equal(enc.list([], new Uint8Array()).length, 0);
});

Deno.test("codec: encodings are cached per record, so a changed record is re-encoded", () => {
  const enc = machineEncoder("p");
  const a = record();
  assert.equal(enc.machine(a), enc.machine(a), "the same record is encoded once");
  const moved = { ...a, state: State.Creating };
  assert.equal(decode("Machine", enc.machine(moved)).state, State.Creating);
  assert.equal(decode("Machine", enc.machine(a)).state, State.Speculative);
  // Encoders for two providers never share bytes.
  const hosted = record({ state: State.Idle, hostRef: "n/1" });
  const host = (p: string) =>
    (decode("Machine", machineEncoder(p).machine(hosted)).host as { provider: string }).provider;
  assert.equal(host("one"), "one");
  assert.equal(host("two"), "two");
});
