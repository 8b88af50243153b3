// Nodes that are down. pveproxy forwards every `/nodes/<node>/...` call to
// that node; when it is down the call fails with 595 ("No route to host",
// "Connection refused") or, after pveproxy's 30 s timeout, 596, with an empty
// body. Cluster-wide calls (/cluster/resources, /nodes) keep working and show
// the node `offline` and its guests `unknown` (docs/proxmox-notes.md).
// One such node must not fail a whole describe pass, startup or a Create.

import { getLogger } from "@logtape/logtape";
import { BackendError } from "../../kit/backend.ts";
import { type Backoff, pollWaits } from "../../async/poll.ts";
import { sleep } from "../../async/sleep.ts";
import { ProxmoxApiError } from "../api/errors.ts";
import type { ApiClient } from "../api/client.ts";
import type { ListedNode } from "../room/counted.ts";

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
  return offlineOf(await nodeList(api, signal, 1));
}

/** The offline nodes of a /nodes answer (none when it could not be read). */
export function offlineOf(list: readonly ListedNode[] | null): Set<string> {
  return new Set((list ?? []).filter((n) => n.status === "offline").map((n) => n.node));
}

/**
 * GET /nodes with each node's status and, when the token holds Sys.Audit on
 * /nodes/<node>, its memory and CPUs (docs/proxmox-notes.md "Node capacity");
 * null when it cannot be read.
 */
export async function nodeList(
  api: ApiClient,
  signal: AbortSignal,
  attempts?: number,
): Promise<ListedNode[] | null> {
  try {
    return await listNodes(api, signal, attempts);
  } catch (err) {
    if (signal.aborted) throw err;
    log.debug("could not list node states: {error}", { error: (err as Error).message });
    return null;
  }
}

async function listNodes(
  api: ApiClient,
  signal: AbortSignal,
  attempts?: number,
): Promise<ListedNode[]> {
  const list = await api.get("/nodes", undefined, signal, attempts ? { attempts } : undefined);
  const out: ListedNode[] = [];
  for (const n of Array.isArray(list) ? list : []) {
    const e = n as Record<string, unknown>;
    if (typeof e?.node !== "string") continue;
    out.push({
      node: e.node,
      status: String(e.status ?? "unknown"),
      ...(typeof e.maxmem === "number" ? { maxmem: e.maxmem } : {}),
      ...(typeof e.maxcpu === "number" ? { maxcpu: e.maxcpu } : {}),
    });
  }
  return out;
}

/**
 * Every node of the cluster and its status, from GET /nodes, which lists every
 * cluster node to any token (docs/proxmox-notes.md#a-node-that-is-down); the
 * status may read `unknown`.
 */
export async function clusterNodes(
  api: ApiClient,
  signal: AbortSignal,
  attempts?: number,
): Promise<Map<string, string>> {
  return new Map((await listNodes(api, signal, attempts)).map((n) => [n.node, n.status]));
}

/** The startup check of --nodes: what a zone's Create must refuse (null: nothing). */
export interface NodeCheck {
  /** Why Creates in `zone` cannot work: a node --nodes names that the cluster does not have. */
  refusal(zone: string): string | null;
  /** Stop checking again (backend close). */
  stop(): void;
}

/** One line naming the nodes of --nodes the cluster lacks and the nodes it has. */
export function unknownNodesProblem(
  configured: readonly string[],
  cluster: ReadonlyMap<string, string>,
): string | null {
  const unknown = configured.filter((n) => !cluster.has(n));
  if (unknown.length === 0) return null;
  const names = unknown.map((n) => JSON.stringify(n)).join(", ");
  const has = [...cluster.keys()].sort().join(", ") || "none the token can see";
  return `${unknown.length === 1 ? "node" : "nodes"} ${names} in --nodes ${
    unknown.length === 1 ? "is not a node" : "are not nodes"
  } of this Proxmox cluster (it has ${has}): correct --nodes (chart: proxmox.nodes) to the names ` +
    "`pvesh get /nodes` shows";
}

/**
 * Checks that every node of `configured` is in the cluster. When the API
 * answers, an unknown node is thrown (startup refuses). When it does not, a
 * WARN says so and the check runs again in the background until it answers;
 * an unknown node found then is an ERROR line, and the provider keeps serving
 * its other zones while every Create in that zone fails with the same line as
 * last_error (a restart would only stop the healthy zones and interrupt their
 * transitions; the operator must fix --nodes and restart anyway).
 */
export async function checkNodes(
  api: ApiClient,
  configured: readonly string[],
  signal: AbortSignal,
  recheck: Backoff,
): Promise<NodeCheck> {
  let nodes: Map<string, string>;
  try {
    nodes = await clusterNodes(api, signal);
  } catch (err) {
    const why = (err as Error).message;
    log.warn(
      "could not list the cluster's nodes to check --nodes ({error}); checking again until the API answers",
      { error: why },
    );
    return recheckNodes(api, configured, recheck);
  }
  const problem = unknownNodesProblem(configured, nodes);
  if (problem !== null) throw new BackendError(problem);
  return { refusal: () => null, stop() {} };
}

function recheckNodes(api: ApiClient, configured: readonly string[], every: Backoff): NodeCheck {
  const ac = new AbortController();
  let problem: string | null = null;
  const unknown = new Set<string>();
  (async () => {
    for (const ms of pollWaits(every)) {
      await sleep(ms, ac.signal);
      let nodes: Map<string, string>;
      try {
        nodes = await clusterNodes(api, ac.signal, 1);
      } catch (err) {
        if (ac.signal.aborted) return;
        log.debug("still cannot list the cluster's nodes: {error}", {
          error: (err as Error).message,
        });
        continue;
      }
      problem = unknownNodesProblem(configured, nodes);
      if (problem === null) {
        log.info("--nodes checked: every node is in the cluster", { nodes: configured.join(",") });
      } else {
        for (const n of configured) if (!nodes.has(n)) unknown.add(n);
        log.error(`${problem}; every Create in ${[...unknown].join(", ")} fails until then`, {
          nodes: configured.join(","),
        });
      }
      return;
    }
    // Every failure is handled in the loop; only stop()'s abort (of a sleep) ends it here.
  })().catch(() => {});
  return {
    refusal: (zone) => (unknown.has(zone) ? problem : null),
    stop: () => ac.abort(),
  };
}

/** The node a per-node call's path names (`/nodes/<node>/…`), if any. */
function nodeOfPath(path: string): string | null {
  return /^\/nodes\/([^/]+)\//.exec(path)?.[1] ?? null;
}

/**
 * The node a failure says cannot be reached, or null: pveproxy's 595 for a
 * node it cannot reach (`No route to host`, `Connection refused`,
 * `Connection timed out`), or another proxy failure for a node /nodes lists
 * offline (docs/proxmox-notes.md "A node that is down").
 */
async function unreachableNode(
  api: ApiClient,
  err: unknown,
  signal: AbortSignal,
): Promise<string | null> {
  if (!isNodeUnreachable(err)) return null;
  const node = nodeOfPath((err as ProxmoxApiError).path);
  if (node === null) return null;
  if ((err as ProxmoxApiError).status === 595) return node;
  return (await offlineNodes(api, signal)).has(node) ? node : null;
}

/**
 * Run `work` (which must be safe to run again from the start) to its end
 * while the nodes it calls come and go: when it fails because a node cannot
 * be reached, wait until the cluster lists that node again and run it once
 * more, until `signal` (the operation's deadline) ends the wait. What waits
 * is logged once, and its going on once. So a Delete or Drain that meets a
 * node that is down completes when the node is back in time, and otherwise
 * times out: it never reports done what it could not see done.
 */
export async function outlastOutages<T>(
  api: ApiClient,
  what: string,
  work: () => Promise<T>,
  signal: AbortSignal,
  recheck: Backoff,
): Promise<T> {
  let waitingFor: string | null = null;
  for (;;) {
    try {
      const done = await work();
      if (waitingFor !== null) {
        log.info("{what} is done now that node {node} is back", {
          what,
          node: waitingFor,
        });
      }
      return done;
    } catch (err) {
      if (signal.aborted) throw err;
      const node = await unreachableNode(api, err, signal);
      if (node === null) throw err;
      if (waitingFor !== node) {
        waitingFor = node;
        log.warn(
          "{what} waits for node {node}, which cannot be reached ({error}); it goes on when the " +
            "node is back, or ends when its time is up",
          { what, node, error: (err as Error).message },
        );
      }
      await untilListed(api, node, signal, recheck);
    }
  }
}

/** Wait until /nodes no longer lists `node` offline (then at least one wait, so a flapping node is not hammered). */
async function untilListed(
  api: ApiClient,
  node: string,
  signal: AbortSignal,
  recheck: Backoff,
): Promise<void> {
  for (const ms of pollWaits(recheck)) {
    await sleep(ms, signal);
    if (!(await offlineNodes(api, signal)).has(node)) return;
  }
}
