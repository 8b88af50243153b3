// The node check of preflight: every --nodes entry is a node of this cluster,
// and online, with the Proxmox VE version it runs (the privileges and checks
// that apply depend on it: docs/proxmox-notes.md "Proxmox VE 9").

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
    const v = await run.versionOf(n);
    if ("error" in v) {
      return warn(
        "node",
        n,
        `online, but its version cannot be read (${v.error}): the checks of the API node's ` +
          "version apply to it",
        `check that ${n} answers GET /nodes/${n}/version`,
      );
    }
    return pass("node", n, `online, Proxmox VE ${v.version}`);
  }));
}

/**
 * A node listed `unknown` has sent the cluster no status figures yet (its
 * pvestatd: just started, stopped or stuck), which says nothing of its API
 * (docs/proxmox-notes.md "A node that is down"): ask the node itself.
 */
async function unreportedNode(run: PreflightRun, n: string): Promise<CheckResult> {
  const fix = `if it stays so, check pvestatd on ${n} (systemctl status pvestatd)`;
  const v = await run.versionOf(n);
  if ("error" in v) {
    return failed(
      "node",
      n,
      `status unknown, and it does not answer (${v.error}): every Create in ` +
        `zone ${n} fails while it does not`,
      `bring ${n} back, or take it out of --nodes and the offerings; ${fix}`,
    );
  }
  return warn(
    "node",
    n,
    `answers, but the cluster has no status figures from it yet (its pvestatd has not ` +
      `reported: just started, or stopped); Proxmox VE ${v.version}`,
    `run preflight again in a minute; ${fix}`,
  );
}
