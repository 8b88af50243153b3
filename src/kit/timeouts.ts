// How long each kind of transition may run before the kit makes the machine
// FAILED (docs/design.md#transitions-and-timeouts). The kit enforces them; the
// app exports them as metrics and hands them to the backend, which ends its
// own in-guest waits first. The defaults, and how a partial setting is
// completed, live here only.

export interface Timeouts {
  create: number;
  configure: number;
  drain: number;
  delete: number;
}

export const DEFAULT_TIMEOUTS: Readonly<Timeouts> = {
  create: 8 * 60_000,
  configure: 8 * 60_000,
  drain: 15 * 60_000,
  delete: 5 * 60_000,
};

/** The timeouts given, the default for each kind left out. */
export function withDefaultTimeouts(given: Partial<Timeouts> = {}): Timeouts {
  return {
    create: given.create ?? DEFAULT_TIMEOUTS.create,
    configure: given.configure ?? DEFAULT_TIMEOUTS.configure,
    drain: given.drain ?? DEFAULT_TIMEOUTS.drain,
    delete: given.delete ?? DEFAULT_TIMEOUTS.delete,
  };
}
