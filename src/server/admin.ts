// The admin endpoint: a unix socket beside the state file, mode 0600, that
// only the provider's own user (and root) can connect to. BigFleet never uses
// it: it serves the operator's `machines recover`, `machines room` and `state backup`
// (docs/security.md#the-admin-socket says why a socket and not a port). One
// request per connection, JSON lines (src/server/admin_wire.ts).

import { getLogger } from "@logtape/logtape";
import { dirname } from "node:path";
import { Code, KitError } from "../kit/errors.ts";
import type { KitOperator, RecoverResult } from "../kit/api.ts";
import { STATE_NAMES } from "../kit/model.ts";
import type { MachineRecord } from "../kit/model.ts";
import type { StateStore } from "../kit/store.ts";
import {
  type AdminAnswer,
  type AdminCode,
  type AdminMachine,
  type AdminRequest,
  encodeLine,
  MAX_REQUEST_BYTES,
  readLine,
  writeAll,
} from "./admin_wire.ts";
import { stagingName } from "../config/admin_socket.ts";
import type { Metrics } from "./metrics.ts";
import type { ZoneRoom } from "../kit/backend.ts";

export interface AdminOptions {
  path: string;
  kit: KitOperator;
  metrics: Metrics;
  /** Opens a new, empty state store at a path (a backup is written through it). */
  openStore(path: string): Promise<StateStore>;
  /** Each zone's room, when the backend counts it (machines room); null: it does not. */
  room: (() => ZoneRoom[]) | null;
}

export interface AdminServer {
  readonly path: string;
  close(): Promise<void>;
}

/** A request line must arrive this soon after connecting. */
const REQUEST_MS = 10_000;
const log = getLogger(["bigfleet", "admin"]);

/**
 * Listen on `path` with mode 0600 from the first moment: the socket is bound
 * under a fresh name in the same directory, restricted, then renamed into
 * place (replacing a socket a crashed provider left; the state lock says
 * no other provider runs on this state).
 */
export async function startAdminServer(opts: AdminOptions): Promise<AdminServer> {
  const { path, kit, metrics } = opts;
  const staging = `${dirname(path)}/${stagingName()}`;
  const listener = Deno.listen({ transport: "unix", path: staging });
  try {
    await Deno.chmod(staging, 0o600);
    await Deno.rename(staging, path);
  } catch (e) {
    listener.close();
    await Deno.remove(staging).catch(() => {});
    throw e;
  }
  const open = new Set<Promise<void>>();
  const serving = (async () => {
    for await (const conn of listener) {
      const done: Promise<void> = serve(conn).finally(() => open.delete(done));
      open.add(done);
    }
  })().catch(() => {});

  async function serve(conn: Deno.Conn): Promise<void> {
    let answer: AdminAnswer;
    let file: string | null = null;
    try {
      const req = await request(conn);
      if (req.op === "recover") answer = await recover(req);
      else if (req.op === "room") answer = room();
      else ({ answer, file } = await backup());
      await writeAll(conn, encodeLine(answer));
      if (file !== null) await send(conn, file);
    } catch (e) {
      answer = failure(e);
      await writeAll(conn, encodeLine(answer)).catch(() => {});
    } finally {
      if (file !== null) await removeStore(file);
      try {
        conn.close();
      } catch { /* closed by the peer */ }
    }
  }

  async function request(conn: Deno.Conn): Promise<AdminRequest> {
    const timer = setTimeout(() => conn.close(), REQUEST_MS);
    let line: string;
    try {
      ({ line } = await readLine(conn, MAX_REQUEST_BYTES));
    } catch (e) {
      throw new AdminError("BAD_REQUEST", `no request line: ${(e as Error).message}`);
    } finally {
      clearTimeout(timer);
    }
    let req: Partial<AdminRequest> & Record<string, unknown>;
    try {
      req = JSON.parse(line);
    } catch {
      throw new AdminError("BAD_REQUEST", "the request is not JSON");
    }
    if (req?.op === "backup") return { op: "backup" };
    if (req?.op === "room") return { op: "room" };
    if (
      req?.op === "recover" && typeof req.id === "string" &&
      (req.action === "destroy" || req.action === "adopt") && typeof req.apply === "boolean"
    ) {
      return { op: "recover", id: req.id, action: req.action, apply: req.apply };
    }
    throw new AdminError("BAD_REQUEST", `unknown request ${JSON.stringify(line.slice(0, 200))}`);
  }

  async function recover(req: AdminRequest & { op: "recover" }): Promise<AdminAnswer> {
    let res: RecoverResult;
    try {
      res = await kit.recover({ machineId: req.id, action: req.action, apply: req.apply });
    } catch (e) {
      if (req.apply) {
        metrics.recovery(req.action, isRefusal(e) ? "refused" : "error");
      }
      log.warn("recover {machineId}: {action} {what}: {error}", {
        audit: true,
        machineId: req.id,
        action: req.action,
        what: req.apply ? "refused or failed" : "(dry run) would be refused",
        error: (e as Error).message,
      });
      throw e;
    }
    if (res.applied) metrics.recovery(req.action, "ok");
    return {
      ok: true,
      op: "recover",
      plan: res.plan,
      applied: res.applied,
      before: shown(res.before),
      after: res.after ? shown(res.after) : null,
    };
  }

  function room(): AdminAnswer {
    if (opts.room === null) {
      throw new AdminError("REFUSED", "this provider's backend counts no room (the fake backend)");
    }
    return { ok: true, op: "room", zones: opts.room() };
  }

  async function backup(): Promise<{ answer: AdminAnswer; file: string }> {
    const file = `${dirname(path)}/.bfbackup-${crypto.randomUUID().slice(0, 8)}.kv`;
    const store = await opts.openStore(file);
    let counts;
    try {
      counts = await kit.backup(store);
    } finally {
      await store.close();
    }
    const { size } = await Deno.stat(file);
    log.info("state backup: {machines} machines, {fences} fence marks at revision {revision}", {
      audit: true,
      ...counts,
      bytes: size,
    });
    return { answer: { ok: true, op: "backup", bytes: size, ...counts }, file };
  }

  return {
    path,
    async close() {
      listener.close();
      await serving;
      await Promise.allSettled([...open]);
      await Deno.remove(path).catch(() => {});
    },
  };
}

async function send(conn: Deno.Conn, file: string): Promise<void> {
  const f = await Deno.open(file);
  try {
    const buf = new Uint8Array(256 * 1024);
    for (;;) {
      const n = await f.read(buf);
      if (n === null) return;
      await writeAll(conn, buf.subarray(0, n));
    }
  } finally {
    f.close();
  }
}

/** A written-and-sent backup and the files its store kept beside it. */
async function removeStore(file: string): Promise<void> {
  for (const p of [file, `${file}.lock`, `${file}-wal`, `${file}-shm`]) {
    await Deno.remove(p).catch(() => {});
  }
}

class AdminError extends Error {
  constructor(readonly code: AdminCode, message: string) {
    super(message);
  }
}

function isRefusal(e: unknown): boolean {
  return e instanceof KitError && (e.code === Code.FailedPrecondition || e.code === Code.NotFound);
}

function failure(e: unknown): AdminAnswer {
  const error = e instanceof Error ? e.message : String(e);
  if (e instanceof AdminError) return { ok: false, code: e.code, error };
  if (e instanceof KitError) {
    const code: AdminCode = e.code === Code.NotFound
      ? "NOT_FOUND"
      : e.code === Code.FailedPrecondition
      ? "REFUSED"
      : e.code === Code.Unavailable
      ? "UNAVAILABLE"
      : e.code === Code.InvalidArgument
      ? "BAD_REQUEST"
      : "INTERNAL";
    return { ok: false, code, error };
  }
  return { ok: false, code: "INTERNAL", error };
}

function shown(m: MachineRecord): AdminMachine {
  return { id: m.id, state: STATE_NAMES[m.state], host: m.hostRef, lastError: m.lastError };
}
