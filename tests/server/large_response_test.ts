// paceWrites and release against a stand-in for a node:http2 stream that
// accepts one slice at a time and drains later, as the real one does once a
// slice is on its way.

import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import type * as grpc from "@grpc/grpc-js";
import {
  FRAME_HEADER_BYTES,
  pacedResponses,
  paceWrites,
  release,
  SLICE_BYTES,
} from "../../src/server/large_response.ts";
import { waitFor } from "../harness/time.ts";

class SlowStream extends EventEmitter {
  readonly writes: Uint8Array[] = [];
  /** Largest number of bytes handed over and not yet drained. */
  maxOutstanding = 0;
  #outstanding = 0;
  /** Writes not yet drained: the stand-in's pending drain events. */
  #pending = 0;
  closed = false;
  /** Writes attempted after the close. */
  afterClose = 0;

  /** Every write has drained: no event of the stream is still to come. */
  get idle(): boolean {
    return this.#pending === 0;
  }

  write(chunk: unknown, ...rest: unknown[]): boolean {
    const cb = rest.find((r) => typeof r === "function") as
      | ((e?: Error | null) => void)
      | undefined;
    const bytes = chunk as Uint8Array;
    if (this.closed) {
      this.afterClose++;
      queueMicrotask(() => cb?.(new Error("write after close")));
      return false;
    }
    // A copy, as node:http2 takes one (a Buffer's own slice() would be a view).
    this.writes.push(bytes instanceof Uint8Array ? Uint8Array.prototype.slice.call(bytes) : bytes);
    this.#outstanding += bytes.length;
    this.maxOutstanding = Math.max(this.maxOutstanding, this.#outstanding);
    this.#pending++;
    setTimeout(() => {
      this.#outstanding -= bytes.length;
      cb?.(null);
      this.emit("drain");
      this.#pending--;
    }, 1);
    return false;
  }
}

/** What grpc-js's own call does with a message: frame a copy, write it. */
function grpcJsCall(stream: SlowStream) {
  return {
    stream,
    sendMetadata() {},
    sendMessage(message: Uint8Array, done: () => void) {
      const frame = new Uint8Array(message.length + 5);
      frame.set(message, 5);
      stream.write(frame, done);
    },
  };
}

function pattern(n: number): Uint8Array {
  return Uint8Array.from({ length: n }, (_, i) => (i * 31) & 0xff);
}

Deno.test("paced write: a large message goes out whole, one drained slice at a time", async () => {
  const s = new SlowStream();
  paceWrites(s);
  const message = pattern(SLICE_BYTES * 5 + 123);
  const done: (Error | null | undefined)[] = [];
  await new Promise<void>((resolve) => {
    s.write(message, (e?: Error | null) => {
      done.push(e);
      resolve();
    });
  });
  await waitFor("every slice to drain", () => s.idle);
  assert.deepEqual(done, [null], "the caller's callback runs once, without error");
  assert.equal(s.writes.length, 6);
  assert.ok(s.writes.every((w) => w.length <= SLICE_BYTES));
  assert.ok(s.maxOutstanding <= SLICE_BYTES, `outstanding ${s.maxOutstanding}`);
  const joined = new Uint8Array(message.length);
  let off = 0;
  for (const w of s.writes) {
    joined.set(w, off);
    off += w.length;
  }
  assert.deepEqual(joined, message);
  assert.equal(s.listenerCount("drain"), 0);
  assert.equal(s.listenerCount("close"), 0);
});

Deno.test("paced write: small writes and non-bytes pass straight through", () => {
  const s = new SlowStream();
  paceWrites(s);
  s.write(pattern(SLICE_BYTES));
  s.write("text");
  assert.equal(s.writes.length, 2);
  assert.equal(s.writes[0].length, SLICE_BYTES);
});

Deno.test("paced write: a stream closed mid-message fails the write once and stops", async () => {
  const s = new SlowStream();
  paceWrites(s);
  const errors: unknown[] = [];
  s.write(pattern(SLICE_BYTES * 4), (e?: Error | null) => errors.push(e));
  s.closed = true;
  s.emit("close");
  // The slice written before the close drains: nothing may follow it.
  await waitFor("the first slice to drain", () => s.idle);
  assert.equal(s.writes.length, 1);
  assert.equal(s.afterClose, 0, "nothing is written after the close");
  assert.equal(errors.length, 1);
  assert.match(String(errors[0]), /closed/);
});

Deno.test("paced write: with release, the written message's memory is given up once written", async () => {
  const s = new SlowStream();
  paceWrites(s, { release: true });
  const message = pattern(SLICE_BYTES * 3);
  await new Promise<void>((resolve) => s.write(message, () => resolve()));
  assert.equal(message.byteLength, 0, "detached after the last slice");
  assert.equal(s.writes.reduce((n, w) => n + w.length, 0), SLICE_BYTES * 3);
});

Deno.test("release: frees a buffer's sole view, never a view into a larger buffer", () => {
  const whole = new Uint8Array(1024);
  release(whole);
  assert.equal(whole.byteLength, 0);
  const backing = new Uint8Array(1024);
  const part = backing.subarray(0, 512);
  release(part);
  assert.equal(part.byteLength, 512);
  assert.equal(backing.byteLength, 1024);
});

Deno.test("paced responses: a one-shot message and its frame are released once written", async () => {
  const stream = new SlowStream();
  const base = grpcJsCall(stream);
  const list = pattern(SLICE_BYTES * 2);
  const kept = pattern(SLICE_BYTES * 2);
  const intercept = pacedResponses((m) => m === list, new Set(["/s/List"]));
  const call = intercept(
    { path: "/s/List" } as grpc.ServerMethodDefinition<unknown, unknown>,
    base as unknown as grpc.ServerInterceptingCallInterface,
  );
  await new Promise<void>((resolve) => call.sendMessage(list, resolve));
  assert.equal(list.byteLength, 0, "the one-shot message is released");
  assert.equal(stream.writes.reduce((n, w) => n + w.length, 0), SLICE_BYTES * 2 + 5);
  await new Promise<void>((resolve) => call.sendMessage(kept, resolve));
  assert.equal(kept.byteLength, SLICE_BYTES * 2, "any other message is left alone");
});

Deno.test("paced responses: another method's call is paced, not wrapped, and its message kept", async () => {
  const stream = new SlowStream();
  const base = grpcJsCall(stream);
  const big = pattern(SLICE_BYTES * 2);
  const intercept = pacedResponses(() => true, new Set(["/s/List"]));
  const call = intercept(
    { path: "/s/Get" } as grpc.ServerMethodDefinition<unknown, unknown>,
    base as unknown as grpc.ServerInterceptingCallInterface,
  );
  assert.equal(call, base as unknown, "the call grpc-js built is passed on as it is");
  await new Promise<void>((resolve) => call.sendMessage(big, resolve));
  assert.ok(stream.writes.length > 1, "the frame went out in slices");
  assert.equal(stream.writes.reduce((n, w) => n + w.length, 0), SLICE_BYTES * 2 + 5);
  assert.equal(big.byteLength, SLICE_BYTES * 2, "the message is not a one-shot List");
});

Deno.test("paced responses: a one-shot List with room for the frame header is framed where it lies", async () => {
  const stream = new SlowStream();
  // grpc-js's own call: serializeMessage frames a copy, sendMessage writes what it returns.
  const base = {
    stream,
    sendMetadata() {},
    serializeMessage(message: Uint8Array): Uint8Array {
      const frame = new Uint8Array(message.length + FRAME_HEADER_BYTES);
      frame.set(message, FRAME_HEADER_BYTES);
      new DataView(frame.buffer).setUint32(1, message.length);
      return frame;
    },
    sendMessage(message: Uint8Array, done: () => void) {
      stream.write(this.serializeMessage(message), done);
    },
  };
  const body = pattern(SLICE_BYTES * 2);
  const roomy = new Uint8Array(body.length + FRAME_HEADER_BYTES);
  roomy.set(body, FRAME_HEADER_BYTES);
  const list = roomy.subarray(FRAME_HEADER_BYTES);
  const tight = pattern(SLICE_BYTES * 2);
  const intercept = pacedResponses((m) => m === list || m === tight, new Set(["/s/List"]));
  const call = intercept(
    { path: "/s/List" } as grpc.ServerMethodDefinition<unknown, unknown>,
    base as unknown as grpc.ServerInterceptingCallInterface,
  );
  const framedWhereItLies = base.serializeMessage(list).buffer === list.buffer;
  assert.ok(framedWhereItLies, "the frame is the List's own buffer, not a copy");
  await new Promise<void>((resolve) => call.sendMessage(list, resolve));
  const wire = new Uint8Array(stream.writes.reduce((n, w) => n + w.length, 0));
  stream.writes.reduce((at, w) => (wire.set(w, at), at + w.length), 0);
  const header = new Uint8Array(5);
  new DataView(header.buffer).setUint32(1, body.length);
  assert.deepEqual(wire.subarray(0, 5), header, "uncompressed, the List's length");
  assert.deepEqual(wire.subarray(5), body);
  assert.equal(list.byteLength, 0, "the List and its frame are released once written");
  // Without the room in front it is framed as grpc-js frames it.
  assert.notEqual(base.serializeMessage(tight).buffer, tight.buffer);
});
