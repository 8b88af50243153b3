// Answers and durability (docs/design.md#answers-and-durability): every answer
// waits until the changes made so far are committed, so nothing a client saw
// can be lost by a crash right after. When the store cannot commit (disk
// full, read-only filesystem):
// - a lifecycle call, reconcile pass or recovery is refused with UNAVAILABLE
//   before it changes anything (`refuseChanges`);
// - a call whose own commit fails is answered UNAVAILABLE too, not
//   acknowledged. Its change stays queued in memory and the store keeps
//   retrying, so it lands when the disk recovers (or never, if the process
//   dies first). Either way is allowed: an unacknowledged call may or may not
//   have happened, and the client's retry replays it idempotently (the same
//   operation id once the change has landed);
// - reads answer from the committed view (src/kit/fleet.ts): what a restart
//   right now would load, never the queued changes, so they keep working and
//   the revision they show never goes backwards across a crash.
// docs/configuration.md#when-the-state-disk-fails says the same for operators.
//
// It also owns the kit's phase: open, finishing (changes refused, reads
// answered), closed (completions ignored).

import { Code, KitError } from "./errors.ts";
import type { Fleet, FleetView } from "./fleet.ts";
import type { StateStore } from "./store.ts";

export interface Answers {
  /** A change: refused while the store is failing or the kit stops, answered once committed. */
  answer<T>(fn: () => T): Promise<T>;
  /** A read: from memory once committed; from the committed view while the store is failing. */
  read<T>(fn: (view: FleetView) => T): Promise<T>;
  /** UNAVAILABLE while the kit is finishing or the store cannot commit: before any change. */
  refuseChanges(): void;
  /** UNAVAILABLE while the kit is finishing. */
  refuseWhileFinishing(): void;
  /** The changes so far are committed; UNAVAILABLE (not acknowledged) when their commit fails. */
  awaitCommit(): Promise<void>;
  /** From now on changes are refused (a graceful stop). */
  finishing(): void;
  /** From now on completions are ignored: the store is being flushed and closed. */
  close(): void;
  readonly closed: boolean;
}

export function createAnswers(store: StateStore, fleet: Fleet): Answers {
  let phase: "open" | "finishing" | "closed" = "open";

  function refuseWhileFinishing(): void {
    if (phase !== "open") {
      throw new KitError(
        Code.Unavailable,
        "the provider is shutting down; nothing was changed, retry against its next instance",
      );
    }
  }

  function refuseChanges(): void {
    refuseWhileFinishing();
    if (store.failure) {
      throw new KitError(
        Code.Unavailable,
        `state store cannot commit (${store.failure}); nothing was changed, retry later`,
      );
    }
  }

  async function awaitCommit(): Promise<void> {
    try {
      await store.durable();
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e);
      throw new KitError(
        Code.Unavailable,
        `state store commit failed (${why}); the call is not acknowledged, retry it`,
      );
    }
  }

  return {
    async answer<T>(fn: () => T): Promise<T> {
      refuseChanges();
      let result: T;
      try {
        result = fn();
      } catch (e) {
        await awaitCommit();
        throw e;
      }
      await awaitCommit();
      return result;
    },
    async read<T>(fn: (view: FleetView) => T): Promise<T> {
      if (!store.failure) {
        let out: { value: T } | { error: unknown };
        try {
          out = { value: fn(fleet) };
        } catch (error) {
          out = { error };
        }
        const failed = await store.durable().then(() => false, () => true);
        if (!failed) {
          if ("value" in out) return out.value;
          throw out.error;
        }
      }
      return fn(fleet.committedView);
    },
    refuseChanges,
    refuseWhileFinishing,
    awaitCommit,
    finishing() {
      if (phase === "open") phase = "finishing";
    },
    close() {
      phase = "closed";
    },
    get closed() {
      return phase === "closed";
    },
  };
}
