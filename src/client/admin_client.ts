// The client side of the admin socket (src/server/admin.ts): one request, its
// answer line, and for a backup the bytes that follow. Every failure is an
// AdminFailure whose message names the socket and what to do.

import {
  type AdminAnswer,
  type AdminCode,
  type AdminRequest,
  encodeLine,
  readLine,
  writeAll,
} from "../server/admin_wire.ts";

/** The provider answered no, or could not be reached. */
export class AdminFailure extends Error {
  constructor(readonly code: AdminCode | "UNREACHABLE", message: string) {
    super(message);
  }
}

export interface AdminTarget {
  socket: string;
  timeoutMs: number;
}

export interface AdminReply<A extends AdminAnswer> {
  answer: A;
  /** For a backup: the connection, positioned after the answer line, and what already arrived. */
  conn: Deno.Conn;
  rest: Uint8Array;
}

/** Send `req`; resolves with a successful answer (the caller closes `conn`), else throws AdminFailure. */
export async function adminCall<A extends AdminAnswer & { ok: true }>(
  target: AdminTarget,
  req: AdminRequest,
): Promise<AdminReply<A>> {
  let conn: Deno.Conn;
  try {
    conn = await Deno.connect({ transport: "unix", path: target.socket });
  } catch (e) {
    const why = e instanceof Deno.errors.NotFound
      ? "no such socket (is the provider running with --state?)"
      : e instanceof Deno.errors.PermissionDenied
      ? "permission denied (run as the provider's user)"
      : (e as Error).message;
    throw new AdminFailure("UNREACHABLE", `cannot reach the admin socket ${target.socket}: ${why}`);
  }
  const timer = setTimeout(() => conn.close(), target.timeoutMs);
  try {
    await writeAll(conn, encodeLine(req));
    const { line, rest } = await readLine(conn, 1024 * 1024);
    const answer = JSON.parse(line) as AdminAnswer;
    if (!answer.ok) throw new AdminFailure(answer.code, answer.error);
    return { answer: answer as A, conn, rest };
  } catch (e) {
    try {
      conn.close();
    } catch { /* closed already */ }
    if (e instanceof AdminFailure) throw e;
    throw new AdminFailure(
      "UNREACHABLE",
      `no answer on ${target.socket} within ${target.timeoutMs / 1000}s: ${(e as Error).message}`,
    );
  } finally {
    clearTimeout(timer);
  }
}
