// The token's effective permissions as Proxmox computes them
// (GET /access/permissions), read once per path for every preflight check.

import type { ApiClient } from "../api/client.ts";

/** Privilege → propagate flag (1 or 0). */
export type Granted = Map<string, number>;

/** The token's effective permissions, read once per path. */
export class Permissions {
  readonly #api: ApiClient;
  readonly #signal: AbortSignal;
  readonly #paths = new Map<string, Promise<Granted>>();
  #tree: Promise<Record<string, unknown>> | null = null;

  constructor(api: ApiClient, signal: AbortSignal) {
    this.#api = api;
    this.#signal = signal;
  }

  at(path: string): Promise<Granted> {
    let p = this.#paths.get(path);
    if (p === undefined) {
      p = this.#api.get<Record<string, unknown>>("/access/permissions", { path }, this.#signal)
        .then((data) => toGranted(data?.[path] ?? Object.values(data ?? {})[0]));
      // A failed read is not kept: its callers get the error, the next call reads again.
      p.catch(() => this.#paths.delete(path));
      this.#paths.set(path, p);
    }
    return p;
  }

  /** Every path the token holds anything on (ACL paths, pool members, the top levels). */
  tree(): Promise<Record<string, unknown>> {
    return this.#tree ??= this.#api.get<Record<string, unknown>>(
      "/access/permissions",
      undefined,
      this.#signal,
    ).then((d) => d ?? {});
  }
}

export function toGranted(value: unknown): Granted {
  const out: Granted = new Map();
  if (value === null || typeof value !== "object") return out;
  for (const [priv, flag] of Object.entries(value)) out.set(priv, Number(flag) ? 1 : 0);
  return out;
}
