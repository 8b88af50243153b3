// Wire codec for the six CapacityProvider methods, on protobufjs's Reader and
// Writer. Done by field number rather than through generated objects because
// the field shape (docs/design.md#field-shape) needs what generic decoding loses: int64 as exact bigint, map
// keys such as "__proto__" kept (maps are [key, value] pairs, never object
// properties), map entries with empty values, and host/resources left out
// entirely when unset. Each machine's encoding is cached by record identity
// (records are immutable), so a List of a large fleet mostly concatenates
// bytes it already has.

// The minimal build: Reader and Writer without the .proto parser, ~8 ms less start-up.
import protobuf from "protobufjs/minimal.js";
// The requests decode into the kit's own shapes (src/kit/api.ts), declared once there.
import type { Token } from "../kit/fence.ts";
import type { Call, ConfigureCall, DrainCall, ListQuery } from "../kit/api.ts";
import type { MachineRecord, Pairs } from "../kit/model.ts";

const { Reader, Writer } = protobuf;
type ReaderT = protobuf.Reader;
type WriterT = protobuf.Writer;

const WIRE_VARINT = 0;
const WIRE_LEN = 2;

/** An int64 field as an exact bigint, from its two 32-bit halves (no decimal round trip). */
function int64(r: ReaderT): bigint {
  const v = r.int64() as unknown as number | { low: number; high: number };
  if (typeof v === "number") return BigInt(v);
  return BigInt.asIntN(64, (BigInt(v.high >>> 0) << 32n) | BigInt(v.low >>> 0));
}

/** A request that is not a well-formed protobuf message: answered INVALID_ARGUMENT. */
export class DecodeError extends Error {
  override name = "DecodeError";
}

/**
 * Reads every field of a message, handing known ones to `on`; returns false to
 * skip. Anything the reader throws (truncation, a bad wire type) is a DecodeError.
 */
export function fields(
  bytes: Uint8Array,
  on: (field: number, wire: number, r: ReaderT) => boolean,
): void {
  // The base Reader, never Reader.create: for a Node Buffer (what grpc-js
  // hands over) create picks a reader whose string() reads past a truncated
  // field without an error, so "machine-1" cut short would decode as "machine-".
  const r = new Reader(bytes);
  try {
    while (r.pos < r.len) {
      const tag = r.uint32();
      const field = tag >>> 3;
      const wire = tag & 7;
      if (!on(field, wire, r)) r.skipType(wire);
    }
  } catch (e) {
    if (e instanceof DecodeError) throw e;
    throw new DecodeError(e instanceof Error ? e.message : String(e));
  }
}

function mapEntry(r: ReaderT): [string, string] {
  let key = "";
  let value = "";
  fields(r.bytes(), (f, w, er) => {
    if (w !== WIRE_LEN) return false;
    if (f === 1) key = er.string();
    else if (f === 2) value = er.string();
    else return false;
    return true;
  });
  return [key, value];
}

function blankToken(): Token {
  return { shardId: "", epoch: 0n, seq: 0n };
}

/** Field numbers of (machine_id, shard_id, shard_epoch, sequence_number) per request type. */
interface TokenFields {
  id: number;
  shard: number;
  epoch: number;
  seq: number;
}

function readCommon(
  f: number,
  w: number,
  r: ReaderT,
  msg: Call,
  nums: TokenFields,
): boolean {
  if (f === nums.id && w === WIRE_LEN) msg.machineId = r.string();
  else if (f === nums.shard && w === WIRE_LEN) msg.token.shardId = r.string();
  else if (f === nums.epoch && w === WIRE_VARINT) msg.token.epoch = int64(r);
  else if (f === nums.seq && w === WIRE_VARINT) msg.token.seq = int64(r);
  else return false;
  return true;
}

export function decodeCreate(bytes: Uint8Array): Call {
  const msg: Call = { machineId: "", token: blankToken() };
  fields(bytes, (f, w, r) => readCommon(f, w, r, msg, { id: 1, shard: 3, epoch: 4, seq: 5 }));
  return msg;
}

export function decodeDelete(bytes: Uint8Array): Call {
  const msg: Call = { machineId: "", token: blankToken() };
  fields(bytes, (f, w, r) => readCommon(f, w, r, msg, { id: 1, shard: 2, epoch: 3, seq: 4 }));
  return msg;
}

export function decodeConfigure(bytes: Uint8Array): ConfigureCall {
  const msg: ConfigureCall = {
    machineId: "",
    token: blankToken(),
    clusterId: "",
    bootstrap: new Uint8Array(),
    shardMetadata: [],
  };
  // A repeated key keeps its last value, as protobuf map semantics require.
  const md = new Map<string, string>();
  fields(bytes, (f, w, r) => {
    if (readCommon(f, w, r, msg, { id: 1, shard: 4, epoch: 5, seq: 6 })) return true;
    if (w !== WIRE_LEN) return false;
    if (f === 2) msg.clusterId = r.string();
    else if (f === 3) msg.bootstrap = r.bytes();
    else if (f === 7) {
      const [k, v] = mapEntry(r);
      md.set(k, v);
    } else return false;
    return true;
  });
  msg.shardMetadata = [...md];
  return msg;
}

export function decodeDrain(bytes: Uint8Array): DrainCall {
  const msg: DrainCall = { machineId: "", token: blankToken(), graceSeconds: 0n };
  fields(bytes, (f, w, r) => {
    if (readCommon(f, w, r, msg, { id: 1, shard: 3, epoch: 4, seq: 5 })) return true;
    if (f === 2 && w === WIRE_VARINT) msg.graceSeconds = int64(r);
    else return false;
    return true;
  });
  return msg;
}

export function decodeMachineRef(bytes: Uint8Array): string {
  let id = "";
  fields(bytes, (f, w, r) => {
    if (f !== 1 || w !== WIRE_LEN) return false;
    id = r.string();
    return true;
  });
  return id;
}

/** The List filter; the cursor is always there (empty when the request has none). */
export function decodeListFilter(bytes: Uint8Array): Required<ListQuery> {
  const states: number[] = [];
  const msg: Required<ListQuery> = { states, maxResults: 0, sinceRevision: new Uint8Array() };
  fields(bytes, (f, w, r) => {
    if (f === 1 && w === WIRE_VARINT) states.push(r.int32());
    else if (f === 1 && w === WIRE_LEN) {
      // Packed repeated enum, the proto3 default encoding.
      const end = r.uint32() + r.pos;
      while (r.pos < end) states.push(r.int32());
    } else if (f === 4 && w === WIRE_VARINT) msg.maxResults = r.int32();
    else if (f === 5 && w === WIRE_LEN) msg.sinceRevision = r.bytes();
    else return false;
    return true;
  });
  return msg;
}

// ---- encoding --------------------------------------------------------------

function writeString(w: WriterT, field: number, s: string): void {
  if (s !== "") w.uint32((field << 3) | WIRE_LEN).string(s);
}

function writeMap(w: WriterT, field: number, pairs: Pairs): void {
  for (const [k, v] of pairs) {
    w.uint32((field << 3) | WIRE_LEN).fork();
    // Both halves are written even when empty: an empty value is still an entry.
    w.uint32((1 << 3) | WIRE_LEN).string(k);
    w.uint32((2 << 3) | WIRE_LEN).string(v);
    w.ldelim();
  }
}

function writeResources(w: WriterT, field: number, pairs: Pairs): void {
  if (pairs.length === 0) return;
  w.uint32((field << 3) | WIRE_LEN).fork();
  writeMap(w, 1, pairs);
  w.ldelim();
}

function encodeMachineUncached(m: MachineRecord, provider: string): Uint8Array {
  const w = Writer.create();
  writeString(w, 1, m.id);
  if (m.state !== 0) w.uint32((2 << 3) | WIRE_VARINT).int32(m.state);
  if (m.hostRef !== "") {
    w.uint32((3 << 3) | WIRE_LEN).fork();
    writeString(w, 1, provider);
    writeString(w, 2, m.hostRef);
    w.ldelim();
  }
  writeString(w, 4, m.instanceType);
  writeString(w, 5, m.zone);
  if (m.capacityType !== 0) w.uint32((6 << 3) | WIRE_VARINT).int32(m.capacityType);
  if (m.pricePerHour !== 0) w.uint32((7 << 3) | 1).double(m.pricePerHour);
  if (m.interruptionProbability !== 0) w.uint32((8 << 3) | 1).double(m.interruptionProbability);
  writeResources(w, 9, m.resources);
  writeMap(w, 10, m.labels);
  writeString(w, 12, m.lastError);
  writeResources(w, 13, m.allocatable);
  writeString(w, 14, m.cluster);
  writeMap(w, 15, m.shardMetadata);
  return w.finish();
}

/** Bytes of a length-delimited field with a one-byte tag (field numbers below 16). */
function lengthDelimitedSize(length: number): number {
  let varint = 1;
  for (let n = length; n >= 0x80; n >>>= 7) varint++;
  return 1 + varint + length;
}

function putLengthDelimited(
  out: Uint8Array,
  pos: number,
  field: number,
  bytes: Uint8Array,
): number {
  out[pos++] = (field << 3) | WIRE_LEN;
  let n = bytes.length;
  while (n >= 0x80) {
    out[pos++] = (n & 0x7f) | 0x80;
    n >>>= 7;
  }
  out[pos++] = n;
  out.set(bytes, pos);
  return pos + bytes.length;
}

export interface MachineEncoder {
  machine(m: MachineRecord): Uint8Array;
  ack(operationId: string, m: MachineRecord): Uint8Array;
  /**
   * A MachineList; `headroom` bytes are left free in front of it in its
   * buffer (the returned view starts after them), for a frame header.
   */
  list(machines: readonly MachineRecord[], revision: Uint8Array, headroom?: number): Uint8Array;
}

/** Encoders bound to the provider label stamped on every HostRef. */
export function machineEncoder(provider: string): MachineEncoder {
  const cache = new WeakMap<MachineRecord, Uint8Array>();
  function machine(m: MachineRecord): Uint8Array {
    let bytes = cache.get(m);
    if (!bytes) {
      bytes = encodeMachineUncached(m, provider);
      cache.set(m, bytes);
    }
    return bytes;
  }
  return {
    machine,
    ack(operationId, m) {
      const w = Writer.create();
      writeString(w, 1, operationId);
      w.uint32((2 << 3) | WIRE_LEN).bytes(machine(m));
      return w.finish();
    },
    list(machines, revision, headroom = 0) {
      // Sized first and filled once: a full List is one allocation and one
      // copy per machine, with no per-field bookkeeping.
      const parts: Uint8Array[] = new Array(machines.length);
      let size = revision.length > 0 ? lengthDelimitedSize(revision.length) : 0;
      for (let i = 0; i < machines.length; i++) {
        const bytes = machine(machines[i]);
        parts[i] = bytes;
        size += lengthDelimitedSize(bytes.length);
      }
      const out = new Uint8Array(headroom + size);
      let pos = headroom;
      for (const bytes of parts) pos = putLengthDelimited(out, pos, 1, bytes);
      if (revision.length > 0) pos = putLengthDelimited(out, pos, 2, revision);
      return headroom > 0 ? out.subarray(headroom) : out;
    },
  };
}
