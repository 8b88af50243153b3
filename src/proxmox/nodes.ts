// Nodes that are down. pveproxy forwards every `/nodes/<node>/...` call to
// that node; when it is down the call fails with 595 ("No route to host",
// "Connection refused") or, after pveproxy's 30 s timeout, 596, with an empty
// body. Cluster-wide calls (/cluster/resources, /nodes) keep working and show
// the node `offline` and its guests `unknown` (docs/proxmox-notes.md).
// One such node must not fail a whole describe pass, startup or a Create.

import { getLogger } from "@logtape/logtape";
import { ProxmoxApiError } from "./errors.ts";
import type { ApiClient } from "./http.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/** AnyEvent::HTTP's statuses for "pveproxy could not reach the node". */
const PROXY_FAILURES = new Set([595, 596, 597, 599]);

/** Whether a per-node call failed because the node could not be reached. */
export function isNodeUnreachable(err: unknown): boolean {
  return err instanceof ProxmoxApiError && PROXY_FAILURES.has(err.status);
}

/**
 * Nodes the cluster reports `offline` (GET /nodes, answered from corosync
 * membership by the node we talk to). An error yields none: then per-node
 * calls find out for themselves.
 */
export async function offlineNodes(api: ApiClient, signal: AbortSignal): Promise<Set<string>> {
  const out = new Set<string>();
  let list: unknown;
  try {
    list = await api.get("/nodes", undefined, signal, { attempts: 1 });
  } catch (err) {
    if (signal.aborted) throw err;
    log.debug("could not list node states: {error}", { error: (err as Error).message });
    return out;
  }
  for (const n of Array.isArray(list) ? list : []) {
    const e = n as Record<string, unknown>;
    if (typeof e?.node === "string" && e.status === "offline") out.add(e.node);
  }
  return out;
}

/** Remembers which nodes are down so each outage is logged once, and its end once. */
export class NodeOutages {
  readonly #down = new Map<string, string>();

  /** Record the nodes found down in one pass (node → why) and those seen working. */
  observe(down: ReadonlyMap<string, string>, working: Iterable<string>, what: string): void {
    for (const [node, why] of down) {
      if (this.#down.has(node)) continue;
      this.#down.set(node, why);
      log.warn("node {node} is unreachable ({reason}); {what} skips its VMs' details", {
        node,
        reason: why,
        what,
      });
    }
    for (const node of working) {
      if (down.has(node) || !this.#down.has(node)) continue;
      this.#down.delete(node);
      log.info("node {node} is reachable again", { node });
    }
  }
}
