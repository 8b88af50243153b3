// The first step of a graceful stop on the wire: once the gate closes, a
// lifecycle call (Create, Configure, Drain, Delete) whose stream begins is
// answered UNAVAILABLE before its request is even read, so the shard retries
// it against the next process; Get, List, health and reflection go on as
// before. Calls that began earlier are not new: they run to their answer
// (a large Configure may still be uploading), and the stop waits for them
// before it waits for the transitions they started (docs/install.md#upgrades-and-restarts).

import * as grpc from "@grpc/grpc-js";
import { passThrough } from "./interceptor.ts";

export const SHUTTING_DOWN = "the provider is shutting down; retry against its next instance";

export class LifecycleGate {
  readonly #paths: ReadonlySet<string>;
  readonly #refused: (path: string) => void;
  #closed = false;
  /** Lifecycle calls begun before the gate closed and not yet answered. */
  #open = 0;
  #idle: PromiseWithResolvers<void> | null = null;

  /** `paths`: the lifecycle methods' paths; `refused` is told of every call the gate answers. */
  constructor(paths: Iterable<string>, refused: (path: string) => void) {
    this.#paths = new Set(paths);
    this.#refused = refused;
  }

  readonly interceptor: grpc.ServerInterceptor = (desc, call) => {
    // Other calls pass through unwrapped: a layer is several objects per call.
    if (!this.#paths.has(desc.path)) return passThrough(call);
    if (this.#closed) {
      return new grpc.ServerInterceptingCall(call, {
        start: (next) =>
          next({
            // The handler never sees it: no metadata is passed on.
            onReceiveMetadata: () => {
              call.sendStatus({ code: grpc.status.UNAVAILABLE, details: SHUTTING_DOWN });
              this.#refused(desc.path);
            },
          }),
      });
    }
    this.#open++;
    let counted = true;
    const done = () => {
      if (!counted) return;
      counted = false;
      if (--this.#open === 0) this.#idle?.resolve();
    };
    return new grpc.ServerInterceptingCall(call, {
      start: (next) => next({ onCancel: done }),
      sendStatus: (status, next) => {
        done();
        next(status);
      },
    });
  };

  /**
   * Refuse every lifecycle call that begins from now on; resolves once those
   * begun before are answered, or when `signal` aborts.
   */
  async close(signal: AbortSignal): Promise<void> {
    this.#closed = true;
    if (this.#open === 0 || signal.aborted) return;
    this.#idle ??= Promise.withResolvers<void>();
    const onAbort = () => this.#idle?.resolve();
    signal.addEventListener("abort", onAbort, { once: true });
    await this.#idle.promise;
    signal.removeEventListener("abort", onAbort);
  }
}
