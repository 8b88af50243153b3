// The JSON API layer: token auth, request encoding the way pve-http-server
// accepts it, the `{data}` envelope, error text extraction, retries of
// idempotent reads on proxy failures (595/596/597/599/502…) and of any call
// pvedaemon refused before its worker ran, and the bound on calls in flight
// per node that pvedaemon's workers run (pvedaemon.ts).

import { getLogger } from "@logtape/logtape";
import {
  isStorageProblem,
  isTransient,
  ProxmoxApiError,
  TlsTrustError,
  TransportError,
  workerNeverStarted,
} from "./errors.ts";
import { sleep } from "../../async/sleep.ts";
import { isAgentPing, protectedNode } from "./pvedaemon.ts";
import type { RawResponse, Transport } from "./transport.ts";
import { fixedToken, type TokenSource } from "./token_source.ts";
import { createKeyedLimit } from "../../async/limit.ts";

export type Params = Record<string, string | number | boolean | string[] | undefined>;

export interface ReadOptions {
  /** Attempts on transient failures; default the client's readAttempts. */
  attempts?: number;
  /**
   * Send as this token when the process knows it (a task is read with the
   * token that started it: docs/proxmox-notes.md "Worker tasks"); otherwise
   * as the token in use.
   */
  as?: string;
  /** With `as`: never as another token; a token no longer known is answered 401 here. */
  only?: boolean;
}

export interface ApiClient {
  /** GET; retried on transient failures (reads are idempotent). */
  get<T = unknown>(
    path: string,
    query: Params | undefined,
    signal: AbortSignal,
    opts?: ReadOptions,
  ): Promise<T>;
  /**
   * POST with a JSON body (or none). Sent again only when pvedaemon refused
   * it before its worker ran (errors.ts workerNeverStarted); on any other
   * failure the caller re-reads state. PUT and DELETE likewise.
   */
  post<T = unknown>(path: string, body: Params | undefined, signal: AbortSignal): Promise<T>;
  /** PUT with a JSON body. */
  put<T = unknown>(path: string, body: Params, signal: AbortSignal): Promise<T>;
  /** DELETE with query parameters. */
  del<T = unknown>(path: string, query: Params | undefined, signal: AbortSignal): Promise<T>;
  /** The tokens this client sends: the one in use, and those a rotation retires. */
  readonly tokens: TokenSource;
  close(): void;
}

export interface ApiClientOptions {
  /** e.g. https://host:8006/api2/json, without a trailing slash (src/config/proxmox.ts). */
  baseUrl: string;
  tokenId: string;
  tokenSecret: string;
  /** Where each request's token comes from instead, when it may change (token_source.ts). */
  token?: TokenSource;
  transport: Transport;
  /** Per-request ceiling; PVE's own proxy gives up after 30 s. */
  requestTimeoutMs: number;
  /** Attempts for GETs on transient failures. */
  readAttempts: number;
  retryBaseMs: number;
  /** Protected calls in flight per node (pvedaemon.ts); 0 or absent: no limit. */
  callsPerNode?: number;
}

const log = getLogger(["bigfleet", "proxmox"]);

/** Canonical reason phrases: carry no server-specific text. */
const GENERIC_REASON =
  /^(OK|Bad Request|Unauthorized|Forbidden|Not Found|Internal Server Error|Not Implemented|Bad Gateway|Service Unavailable|Gateway Timeout)$/i;

function toQuery(params: Params | undefined): string {
  if (!params) return "";
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined) continue;
    if (Array.isArray(v)) { for (const x of v) q.append(k, x); }
    else q.set(k, typeof v === "boolean" ? (v ? "1" : "0") : String(v));
  }
  const s = q.toString();
  return s === "" ? "" : `?${s}`;
}

function stripUndefined(params: Params): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(params)) if (v !== undefined) out[k] = v;
  return out;
}

/** Build the error text: server message, else reason phrase, else status + `errors`. */
export function errorFromResponse(method: string, path: string, res: RawResponse): ProxmoxApiError {
  const text = new TextDecoder().decode(res.body);
  let message = "";
  let errors: Record<string, string> = {};
  let json = false;
  try {
    const v = JSON.parse(text);
    json = true;
    if (typeof v?.message === "string") message = v.message.trim();
    if (v?.errors && typeof v.errors === "object") {
      for (const [k, e] of Object.entries(v.errors)) errors[k] = String(e).trim();
    }
  } catch {
    // Not JSON (a proxy's plain text, an HTML page): the status and reason say what there is.
    errors = {};
  }
  const reason = res.reason.trim();
  let serverText = message || (GENERIC_REASON.test(reason) ? "" : reason);
  // Proxy errors (59x) come as plain text; its first line is the only detail there is.
  if (serverText === "" && !json && text.trim() !== "" && res.status >= 500) {
    serverText = text.trim().split("\n")[0].slice(0, 200);
  }
  const detail = Object.entries(errors).map(([k, e]) => `${k}: ${e}`).join("; ");
  let what = serverText;
  if (res.status === 401) what = "authentication failed (check the API token id and secret)";
  else if (what === "") what = `HTTP ${res.status}${reason ? ` ${reason}` : ""}`;
  if (detail !== "" && !what.includes(detail)) what += ` (${detail})`;
  const kind = isStorageProblem(serverText) ? " (storage problem)" : "";
  const msg = `proxmox ${method} ${path}: ${res.status}${kind} ${what}`;
  return new ProxmoxApiError(method, path, res.status, serverText, msg);
}

export function createApiClient(opts: ApiClientOptions): ApiClient {
  const token = opts.token ?? fixedToken(opts.tokenId, opts.tokenSecret);
  const limit = opts.callsPerNode ?? 0;
  const workers = createKeyedLimit(limit);
  // An agent ping to a booting guest holds its worker for 3 s: pings never
  // take the last place, so tasks, configs and starts always find one.
  const pings = createKeyedLimit(limit > 0 ? Math.max(1, limit - 1) : 0);

  /** The header to send `read` with; null when it must go as a token no longer known. */
  const headerFor = (read: ReadOptions): string | null => {
    // Asked on every request, so a changed token file is seen whatever the request.
    const current = token.authorization();
    if (read.as === undefined) return current;
    return token.authorizationOf(read.as) ?? (read.only ? null : current);
  };

  async function once(
    method: "GET" | "POST" | "PUT" | "DELETE",
    path: string,
    query: Params | undefined,
    body: Params | undefined,
    signal: AbortSignal,
    read: ReadOptions = {},
    retried = false,
  ): Promise<unknown> {
    const url = new URL(opts.baseUrl + path + toQuery(query));
    const auth = headerFor(read);
    if (auth === null) {
      throw new ProxmoxApiError(
        method,
        path,
        401,
        "",
        `proxmox ${method} ${path}: 401 token ${read.as} is no longer accepted`,
      );
    }
    const headers: Record<string, string> = { Authorization: auth, Accept: "application/json" };
    let payload: Uint8Array<ArrayBuffer> | undefined;
    if (body !== undefined) {
      // pve-http-server rejects anything but JSON or form bodies (506).
      headers["Content-Type"] = "application/json";
      payload = new TextEncoder().encode(JSON.stringify(stripUndefined(body)));
    }
    const node = protectedNode(method, path);
    // The request timeout starts once a place is free: waiting for one is our own queue.
    const timer: { signal?: AbortSignal } = {};
    const send = () => {
      timer.signal = AbortSignal.timeout(opts.requestTimeoutMs);
      return opts.transport.send(
        { method, url, headers, body: payload },
        AbortSignal.any([signal, timer.signal]),
      );
    };
    let res: RawResponse;
    try {
      res = await (node === null
        ? send()
        : isAgentPing(path)
        ? pings.run(node, () =>
          workers.run(node, send, signal), signal)
        : workers.run(node, send, signal));
    } catch (err) {
      if (signal.aborted) throw signal.reason ?? err;
      if (timer.signal?.aborted) {
        throw new TransportError(
          `proxmox ${method} ${path}: no response within ${opts.requestTimeoutMs / 1000}s`,
        );
      }
      if (err instanceof TlsTrustError || err instanceof TransportError) {
        // Re-prefix so the operator sees which call failed; the text never holds secrets.
        const E = err.constructor as new (m: string) => Error;
        throw new E(`proxmox ${method} ${path}: ${err.message}`);
      }
      throw new TransportError(`proxmox ${method} ${path}: ${(err as Error)?.message ?? err}`);
    }
    // A 401 was decided before anything ran: safe to send again once, with a rotated token.
    if (res.status === 401 && !retried) {
      token.refused(auth);
      const next = headerFor(read);
      if (next !== null && next !== auth) {
        return await once(method, path, query, body, signal, read, true);
      }
    }
    if (res.status < 200 || res.status > 299) throw errorFromResponse(method, path, res);
    try {
      const v = JSON.parse(new TextDecoder().decode(res.body));
      if (v === null || typeof v !== "object" || !("data" in v)) throw new Error("no data");
      return v.data;
    } catch {
      throw new ProxmoxApiError(
        method,
        path,
        res.status,
        "",
        `proxmox ${method} ${path}: ${res.status} response without a JSON {"data"} envelope`,
      );
    }
  }

  /** `call` again, up to `attempts` in all, while its failure is one `again` says did no harm. */
  async function retrying(
    method: string,
    path: string,
    attempts: number,
    again: (err: unknown) => boolean,
    signal: AbortSignal,
    call: () => Promise<unknown>,
  ): Promise<unknown> {
    for (let attempt = 1;; attempt++) {
      try {
        return await call();
      } catch (err) {
        if (!again(err) || attempt >= attempts || signal.aborted) throw err;
        log.debug("sending {method} {path} again after {error}", {
          method,
          path,
          attempt,
          error: (err as Error).message,
        });
        await sleep(opts.retryBaseMs * attempt, signal);
      }
    }
  }

  const send = (
    method: "POST" | "PUT" | "DELETE",
    path: string,
    query: Params | undefined,
    body: Params | undefined,
    signal: AbortSignal,
  ) =>
    retrying(
      method,
      path,
      opts.readAttempts,
      workerNeverStarted,
      signal,
      () => once(method, path, query, body, signal),
    ) as never;

  return {
    get: (path, query, signal, read = {}) =>
      retrying(
        "GET",
        path,
        read.attempts ?? opts.readAttempts,
        isTransient,
        signal,
        () => once("GET", path, query, undefined, signal, read),
      ) as never,
    post: (path, body, signal) => send("POST", path, undefined, body, signal),
    put: (path, body, signal) => send("PUT", path, undefined, body, signal),
    del: (path, query, signal) => send("DELETE", path, query, undefined, signal),
    tokens: token,
    close: () => opts.transport.close(),
  };
}
