// Large responses (full Lists of a big fleet) leave memory as soon as they are
// on their way, so the process's peak follows the responses in flight, not the
// history (docs/performance.md).
//
// - Paced writes. grpc-js writes a whole framed message with one
//   `stream.write`. Deno's node:http2 copies it into a per-stream native
//   buffer that stays allocated until the JS stream object is collected, and
//   V8 does not see that memory, so nothing hurries the collection: a few
//   hundred full Lists pinned hundreds of MB. Written in slices, each after
//   the previous one drained, a stream holds at most one slice natively. The
//   bytes on the wire are the same: HTTP/2 frames the data either way.
// - Released buffers. A List's encoding and grpc-js's framed copy of it are
//   dead once the frame has been written; their ArrayBuffers are detached
//   then (which frees the memory at once) rather than left for the next GC.

import type * as grpc from "@grpc/grpc-js";
import { ServerInterceptingCall } from "@grpc/grpc-js";
import { Buffer } from "node:buffer";
import { passThrough } from "./interceptor.ts";

/**
 * Writes up to this size go out as they are; larger ones in slices of it.
 * Below glibc's initial mmap threshold (128 KiB): the native copies of a
 * slice then come from and go back to malloc's free lists. Mapped ones raise
 * the threshold once freed, after which glibc serves large buffers from its
 * main heap and keeps their pages (at 20,000 machines the heap grew by ~28
 * MiB over 120 Lists with 256 KiB slices, ~12 MiB with 32 KiB ones, at the
 * same CPU per List: docs/performance.md).
 */
export const SLICE_BYTES = 32 * 1024;

/** The part of a node:http2 server stream this needs. */
export interface WritableStream {
  write(chunk: unknown, ...rest: unknown[]): boolean;
  once(event: "drain" | "close", listener: () => void): unknown;
  off(event: "drain" | "close", listener: () => void): unknown;
}

type Done = (error?: Error | null) => void;

/**
 * Frees `bytes` now if they are the whole of their ArrayBuffer (a view into a
 * shared or pooled buffer is left alone). The caller must hold the only use.
 */
export function release(bytes: Uint8Array): void {
  const buffer = bytes.buffer;
  if (
    buffer instanceof ArrayBuffer && bytes.byteOffset === 0 &&
    bytes.byteLength === buffer.byteLength && buffer.byteLength > 0
  ) {
    buffer.transfer(0);
  }
}

export interface PaceOptions {
  sliceBytes?: number;
  /** Large writes are the caller's to give up: release each once written. */
  release?: boolean;
  /** Runs after each large write has been handed over (or failed). */
  afterLargeWrite?: () => void;
}

/** Makes `stream.write` of a large Uint8Array go out in drained slices. */
export function paceWrites(stream: WritableStream, o: PaceOptions = {}): void {
  const sliceBytes = o.sliceBytes ?? SLICE_BYTES;
  const write = stream.write.bind(stream);
  stream.write = (chunk: unknown, ...rest: unknown[]): boolean => {
    if (!(chunk instanceof Uint8Array) || chunk.byteLength <= sliceBytes) {
      return write(chunk, ...rest);
    }
    const done = rest.find((r): r is Done => typeof r === "function");
    writeSliced(stream, write, chunk, sliceBytes, (error) => {
      // Every slice has been copied by the native side (or the stream is gone).
      if (o.release) release(chunk);
      o.afterLargeWrite?.();
      done?.(error);
    });
    // Like a write past the high-water mark: the caller may wait for "drain".
    return false;
  };
}

function writeSliced(
  stream: WritableStream,
  write: WritableStream["write"],
  bytes: Uint8Array,
  sliceBytes: number,
  done: Done,
): void {
  let offset = 0;
  let finished = false;
  const finish = (error?: Error | null) => {
    if (finished) return;
    finished = true;
    stream.off("drain", next);
    stream.off("close", closed);
    done(error ?? null);
  };
  // A stream closed before the last slice never drains again.
  const closed = () => finish(new Error("stream closed before the response was written"));
  function next(): void {
    stream.off("drain", next);
    while (offset < bytes.byteLength) {
      const slice = bytes.subarray(offset, offset + sliceBytes);
      offset += slice.byteLength;
      if (offset >= bytes.byteLength) {
        write(slice, finish);
        return;
      }
      if (!write(slice)) {
        stream.once("drain", next);
        return;
      }
    }
  }
  stream.once("close", closed);
  next();
}

/** A gRPC message's frame header: a compressed flag and a 4-byte big-endian length. */
export const FRAME_HEADER_BYTES = 5;

/**
 * grpc-js frames a message by copying it into a new buffer behind the 5-byte
 * header. A one-shot message encoded with that much room in front of it (see
 * MachineEncoder.list) is framed where it lies instead: one full-size buffer
 * per List, not two. Anything else, or a grpc-js without this method, is
 * framed by grpc-js as before.
 */
function frameInPlace(call: unknown, oneShot: (message: unknown) => boolean): void {
  const base = call as { serializeMessage?: (value: unknown) => Uint8Array };
  const serialize = base.serializeMessage;
  if (typeof serialize !== "function") return;
  base.serializeMessage = (value: unknown) => {
    if (
      value instanceof Uint8Array && oneShot(value) && value.byteOffset === FRAME_HEADER_BYTES &&
      value.buffer.byteLength === value.byteLength + FRAME_HEADER_BYTES
    ) {
      const frame = Buffer.from(value.buffer, 0, value.buffer.byteLength);
      frame[0] = 0; // not compressed
      frame.writeUInt32BE(value.byteLength, 1);
      return frame;
    }
    return serialize.call(base, value);
  };
}

function isWritable(s: unknown): s is WritableStream {
  const o = s as Partial<WritableStream> | null;
  return typeof o?.write === "function" && typeof o.once === "function" &&
    typeof o.off === "function";
}

/**
 * A grpc-js server interceptor that paces the writes of every call. What
 * grpc-js writes is its own framed copy of a message, released once written;
 * a message of a method in `oneShotPaths` that `oneShot` accepts (a List
 * encoded for this response alone) is released then too: grpc-js has copied
 * it into the frame by that time. Calls of other methods are not wrapped (a
 * layer is several objects per call).
 *
 * It must be the first interceptor: only the call grpc-js builds itself holds
 * the HTTP/2 stream. Should a grpc-js upgrade move it, calls still work,
 * unpaced (tests/server/memory_test.ts then fails).
 */
export function pacedResponses(
  oneShot: (message: unknown) => boolean,
  oneShotPaths: ReadonlySet<string>,
): grpc.ServerInterceptor {
  return (desc, call) => {
    const stream = (call as unknown as { stream?: unknown }).stream;
    if (!isWritable(stream)) return passThrough(call);
    if (!oneShotPaths.has(desc.path)) {
      paceWrites(stream, { release: true });
      return passThrough(call);
    }
    frameInPlace(call, oneShot);
    const sent: Uint8Array[] = [];
    paceWrites(stream, {
      release: true,
      afterLargeWrite: () => sent.splice(0).forEach(release),
    });
    return new ServerInterceptingCall(call, {
      sendMessage(message, next) {
        if (oneShot(message)) sent.push(message as Uint8Array);
        next(message);
      },
    });
  };
}
