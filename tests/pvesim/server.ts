// The HTTPS front end, modelled on pve-http-server: body framing and
// content-type checks, token auth, routing, parameter merging, and PVE-shaped
// replies. Built on node:https because Deno.serve cannot send a custom
// reason phrase, and PVE puts the error text there.

import https from "node:https";
import type { IncomingMessage, ServerResponse } from "node:http";
import { isProtected, type Proxied, proxied } from "./daemon.ts";
import { ApiError, forbidden, reasonPhrase } from "./errors.ts";
import { isForbidden, offlineNodeOf, take596 } from "./faults.ts";
import { validate } from "./params.ts";
import { checkQuorum, offlineAnswer } from "./multinode.ts";
import { matchRoute, type Route, type RouteCtx, type SimCore } from "./router.ts";
import type { SimRequestLog } from "./types.ts";

export interface ServerOptions {
  core: SimCore;
  routes: Route[];
  /** Accepted tokens, id → secret; the simulator adds and removes entries as tokens rotate. */
  tokens: Map<string, string>;
  legacyErrors: boolean;
  authFailDelayMs: number;
  maxBodyBytes: number;
  requests: SimRequestLog[];
  certPem: string;
  keyPem: string;
}

const PREFIX = "/api2/json";

interface Reply {
  status: number;
  reason: string;
  headers: Record<string, string>;
  body: string;
}

function jsonReply(status: number, reason: string, payload: unknown): Reply {
  return {
    status,
    reason,
    headers: { "Content-Type": "application/json;charset=UTF-8" },
    body: JSON.stringify(payload),
  };
}

function errorReply(e: ApiError, legacy: boolean): Reply {
  const payload: Record<string, unknown> = { data: null };
  if (e.errors) payload.errors = e.errors;
  // `message` exists only since libpve-http-server-perl 5.2.0.
  if (!legacy) payload.message = e.message;
  return jsonReply(e.status, reasonPhrase(e.message), payload);
}

/** Form body: repeated keys become arrays, `+` is a space. */
function parseForm(text: string): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const part of text.split("&")) {
    if (part === "") continue;
    const eq = part.indexOf("=");
    const dec = (s: string) => decodeURIComponent(s.replace(/\+/g, " "));
    const k = dec(eq < 0 ? part : part.slice(0, eq));
    const v = eq < 0 ? "" : dec(part.slice(eq + 1));
    const prev = out[k];
    if (prev === undefined) out[k] = v;
    else if (Array.isArray(prev)) prev.push(v);
    else out[k] = [prev, v];
  }
  return out;
}

/** Authorization → token id, or the 401 reason. */
function authenticate(
  header: string | undefined,
  tokens: ReadonlyMap<string, string>,
): { authid?: string; reason?: string } {
  if (!header) return { reason: "No ticket" };
  const m = header.match(/^PVEAPIToken[= ](\S+)$/);
  if (!m) return { reason: "No ticket" };
  let value: string;
  try {
    value = decodeURIComponent(m[1]);
  } catch {
    return { reason: "Authentication failed!" };
  }
  // Split at the last "=": the token id never contains one, the secret might not either.
  const eq = value.lastIndexOf("=");
  const id = eq < 0 ? value : value.slice(0, eq);
  const sec = eq < 0 ? "" : value.slice(eq + 1);
  if (!/^\S+@\S+!\S+$/.test(id) || tokens.get(id) !== sec) {
    return { reason: "Authentication failed!" };
  }
  return { authid: id };
}

export class SimServer {
  #server: https.Server;
  constructor(private o: ServerOptions) {
    this.#server = https.createServer(
      { cert: o.certPem, key: o.keyPem },
      (req, res) => void this.#handle(req, res),
    );
  }

  listen(port: number, host: string): Promise<number> {
    return new Promise((resolve, reject) => {
      this.#server.once("error", reject);
      this.#server.listen(port, host, () => {
        const addr = this.#server.address();
        resolve(typeof addr === "object" && addr ? addr.port : port);
      });
    });
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.#server.close(() => resolve());
      this.#server.closeAllConnections();
    });
  }

  async #readBody(req: IncomingMessage): Promise<{ bytes: Uint8Array; tooLarge: boolean }> {
    const chunks: Uint8Array[] = [];
    let size = 0;
    let tooLarge = false;
    for await (const chunk of req) {
      size += (chunk as Uint8Array).length;
      if (size > this.o.maxBodyBytes) tooLarge = true;
      else chunks.push(chunk as Uint8Array);
    }
    const bytes = new Uint8Array(tooLarge ? 0 : size);
    let off = 0;
    if (!tooLarge) {
      for (const c of chunks) {
        bytes.set(c, off);
        off += c.length;
      }
    }
    return { bytes, tooLarge };
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = (req.method ?? "GET").toUpperCase();
    const url = new URL(req.url ?? "/", "https://pvesim");
    const path = url.pathname.startsWith(PREFIX) ? url.pathname.slice(PREFIX.length) : url.pathname;
    const log: SimRequestLog = {
      at: Date.now(),
      method,
      path,
      query: url.search.replace(/^\?/, ""),
      authenticated: false,
      status: 0,
      reason: "",
    };
    this.o.requests.push(log);
    let reply: Reply;
    try {
      reply = await this.#process(req, method, url, path, log);
    } catch (e) {
      reply = e instanceof ApiError
        ? errorReply(e, this.o.legacyErrors)
        : errorReply(new ApiError(500, `internal simulator error: ${e}`), this.o.legacyErrors);
    }
    log.status = reply.status;
    log.reason = reply.reason;
    const headers: Record<string, string> = {
      "Server": "pve-api-daemon/3.0",
      "Cache-Control": "max-age=0",
      "Pragma": "no-cache",
      "Expires": new Date().toUTCString(),
      ...reply.headers,
      "Content-Length": String(new TextEncoder().encode(reply.body).length),
    };
    // pve-http-server closes the connection after any error status.
    if (reply.status >= 400) headers["Connection"] = "close";
    if (res.destroyed) return;
    res.writeHead(reply.status, reply.reason, headers);
    res.end(reply.body);
  }

  async #process(
    req: IncomingMessage,
    method: string,
    url: URL,
    path: string,
    log: SimRequestLog,
  ): Promise<Reply> {
    const o = this.o;
    const { bytes, tooLarge } = await this.#readBody(req);
    const hasBody = bytes.length > 0 || tooLarge;
    if (tooLarge) throw new ApiError(501, "for data too large");
    if (hasBody && (method === "GET" || method === "DELETE")) {
      throw new ApiError(501, `Unexpected content for method '${method}'`);
    }
    let body: Record<string, unknown> = {};
    if (hasBody) {
      const ct = (req.headers["content-type"] ?? "").split(";")[0].trim().toLowerCase();
      const text = new TextDecoder().decode(bytes);
      if (ct === "application/x-www-form-urlencoded") body = parseForm(text);
      else if (ct === "application/json") {
        try {
          const v = JSON.parse(text);
          if (v === null || typeof v !== "object" || Array.isArray(v)) {
            throw new Error("not an object");
          }
          body = v;
        } catch (e) {
          throw new ApiError(400, `Parameter verification failed - invalid JSON: ${e}`);
        }
      } else {
        throw new ApiError(
          506,
          `upload 'Content-Type '${req.headers["content-type"] ?? ""}' not implemented'`,
        );
      }
    }

    const auth = authenticate(req.headers["authorization"], o.tokens);
    if (!auth.authid || o.core.faults.unauthorized) {
      if (o.authFailDelayMs > 0) await o.core.timers.sleep(o.authFailDelayMs);
      const reason = auth.reason ?? "Authentication failed!";
      return { status: 401, reason, headers: {}, body: "" };
    }
    log.authenticated = true;
    log.tokenId = auth.authid;

    const down = offlineNodeOf(o.core.faults, path);
    if (down !== null) {
      // pveproxy's connection to that node fails (AnyEvent::HTTP 595/596): no JSON, no body.
      return { ...await offlineAnswer(o.core, down), headers: {}, body: "" };
    }
    if (!url.pathname.startsWith(PREFIX + "/")) {
      throw new ApiError(501, `Method '${method} ${url.pathname}' not implemented`);
    }
    const m = matchRoute(o.routes, method, path);
    if (!m) throw new ApiError(501, `Method '${method} ${path}' not implemented`);

    const input: Record<string, unknown> = { ...body };
    for (const [k, v] of url.searchParams) {
      const prev = input[k];
      input[k] = prev !== undefined && Array.isArray(prev) ? [...prev, v] : v;
    }
    for (const [k, v] of Object.entries(m.pathParams)) {
      if (k in input && String(input[k]) !== v) {
        throw new ApiError(400, "Parameter verification failed.", {
          [k]: "duplicate parameter (already defined in URI) with conflicting values!",
        });
      }
      input[k] = v;
    }
    log.params = input;
    const params = validate(m.route.schema, input);
    o.core.faults.onRequest?.(method, path);

    if (isForbidden(o.core.faults, path)) {
      const [aclPath, priv] = m.route.perm(params);
      throw forbidden(aclPath, priv);
    }
    m.route.check?.(o.core, params);
    checkQuorum(o.core, method, path);

    const rule = take596(o.core.faults, method, path);
    if (rule && rule.performed === false) return await this.#proxyFailure(rule);
    const ctx = { core: o.core, params, authid: auth.authid };
    if (rule) {
      // The work happens (or fails) behind the proxy; the client only sees the 59x.
      await this.#run(m.route, ctx, log).catch(() => {});
      return await this.#proxyFailure(rule);
    }
    const out = await this.#run(m.route, ctx, log);
    if (out.timedOut) return await this.#proxyFailure({ status: 596 });
    return jsonReply(200, "OK", { data: out.value ?? null });
  }

  /**
   * The handler, in a worker of the node's pvedaemon when the method is
   * protected (daemon.ts): queued while all workers are busy, holding one for
   * the route's worker time, and given up on by pveproxy after proxyTimeoutMs.
   */
  #run(route: Route, ctx: RouteCtx, log: SimRequestLog): Promise<Proxied<unknown>> {
    const core = this.o.core;
    const node = route.pattern.startsWith("/nodes/{node}")
      ? String(ctx.params.node)
      : core.state.nodes[0];
    const pool = core.daemons.get(node);
    const handle = async () => await route.handler(ctx);
    if (!isProtected(route.method, route.pattern) || pool === undefined) {
      return handle().then((value) => ({ timedOut: false, value }));
    }
    log.workerNode = node;
    const hold = route.workerMs?.(ctx) ?? core.state.timing.daemonCallMs;
    return proxied(core.timers, pool, core.state.timing.proxyTimeoutMs, async () => {
      if (hold > 0) await core.timers.sleep(hold);
      return await handle();
    }, (waited) => log.workerWaitMs = waited);
  }

  async #proxyFailure(
    rule: { status?: number; reason?: string; delayMs?: number },
  ): Promise<Reply> {
    if (rule.delayMs) await this.o.core.timers.sleep(rule.delayMs);
    const reason = rule.reason ?? "Connection timed out";
    // AnyEvent::HTTP errors reach the client as plain text, not JSON.
    return {
      status: rule.status ?? 596,
      reason,
      headers: { "Content-Type": "text/plain;charset=UTF-8" },
      body: reason + "\n",
    };
  }
}
