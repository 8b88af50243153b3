// Error values the handlers throw; the server turns them into PVE-shaped
// replies (reason phrase = first line of the message, JSON `message` field).

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly errors?: Record<string, string>,
  ) {
    // PVE messages come from Perl `die "...\n"`, so they end in a newline.
    super(message.endsWith("\n") ? message : message + "\n");
  }
}

/** A `die` in a handler: 500 with the text. */
export function fail(message: string): ApiError {
  return new ApiError(500, message);
}

/** raise_param_exc: 400 "Parameter verification failed." with per-parameter detail. */
export function paramError(errors: Record<string, string>): ApiError {
  return new ApiError(400, "Parameter verification failed.", errors);
}

/** What PVE answers for a VM that is not on that node (never 404). */
export function noConfig(node: string, vmid: number): ApiError {
  return fail(`Configuration file 'nodes/${node}/qemu-server/${vmid}.conf' does not exist`);
}

export function lockedError(lock: string): ApiError {
  return fail(`VM is locked (${lock})`);
}

export function forbidden(path: string, priv: string): ApiError {
  return new ApiError(403, `Permission check failed (${path}, ${priv})`);
}

/** Failure inside a task worker: ends up as the task's exitstatus. */
export class TaskFailure extends Error {}

/** First line of a message, safe for an HTTP reason phrase. */
export function reasonPhrase(message: string): string {
  const line = message.split("\n")[0] ?? "";
  // Reason phrases must be visible ASCII/space; PVE texts are ASCII anyway.
  return line.replace(/[^\x20-\x7e]/g, "?").slice(0, 400);
}
