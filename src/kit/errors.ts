// Contract-level rejections. The numbers are gRPC status codes, each used as
// docs/design.md#order-of-checks-and-idempotency says; the server passes them
// through unchanged.

export const Code = {
  InvalidArgument: 3,
  NotFound: 5,
  PermissionDenied: 7,
  /** A Create the backend's admission refused (no room in the zone now): try elsewhere. */
  ResourceExhausted: 8,
  FailedPrecondition: 9,
  /** Out-of-position calls: anything but FAILED_PRECONDITION, which is reserved for fencing. */
  Internal: 13,
  Unavailable: 14,
} as const;
export type Code = (typeof Code)[keyof typeof Code];

export class KitError extends Error {
  override name = "KitError";
  constructor(readonly code: Code, message: string) {
    super(message);
  }
}
