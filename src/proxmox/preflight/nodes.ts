// The node check of preflight: every --nodes entry is a node of this cluster,
// and online.

import { clusterNodes } from "../cluster/nodes.ts";
import { type CheckResult, failed, pass, warn } from "./result.ts";
import type { PreflightRun } from "./run.ts";

/** Every --nodes entry is a node of this cluster and online (or, while unreported, answering). */
export async function nodeChecks(run: PreflightRun): Promise<CheckResult[]> {
  const status = await clusterNodes(run.api, run.signal);
  const known = [...status.keys()].sort().join(", ");
  return await Promise.all(run.px.nodes.map(async (n) => {
    const s = status.get(n);
    if (s === undefined) {
      return failed(
        "node",
        n,
        `not a node of this cluster (it has ${known || "none the token can see"})`,
        "correct --nodes (chart: proxmox.nodes) to the names `pvesh get /nodes` shows",
      );
    }
    if (s === "unknown") return await unreportedNode(run, n);
    if (s !== "online") {
      return failed(
        "node",
        n,
        `${s}: every Create in zone ${n} fails while it is`,
        `bring ${n} back into the cluster, or take it out of --nodes and the offerings`,
      );
    }
    return pass("node", n, "online");
  }));
}

/**
 * A node listed `unknown` has sent the cluster no status figures yet (its
 * pvestatd: just started, stopped or stuck), which says nothing of its API
 * (docs/proxmox-notes.md "A node that is down"): ask the node itself.
 */
async function unreportedNode(run: PreflightRun, n: string): Promise<CheckResult> {
  const fix = `if it stays so, check pvestatd on ${n} (systemctl status pvestatd)`;
  try {
    await run.api.get(`/nodes/${encodeURIComponent(n)}/version`, undefined, run.signal, {
      attempts: 1,
    });
  } catch (err) {
    return failed(
      "node",
      n,
      `status unknown, and it does not answer (${(err as Error).message}): every Create in ` +
        `zone ${n} fails while it does not`,
      `bring ${n} back, or take it out of --nodes and the offerings; ${fix}`,
    );
  }
  return warn(
    "node",
    n,
    "answers, but the cluster has no status figures from it yet (its pvestatd has not " +
      "reported: just started, or stopped)",
    `run preflight again in a minute; ${fix}`,
  );
}
