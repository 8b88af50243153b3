// The pool check of preflight: --proxmox-pool exists and the token sees it.

import { type CheckResult, failed, pass, warn } from "./result.ts";
import type { PreflightRun } from "./run.ts";

/** The pool exists (a missing pool is a 403 on clone, not a clear error). */
export async function poolCheck(run: PreflightRun): Promise<CheckResult[]> {
  const pool = run.px.pool;
  if (pool === "") {
    return [warn(
      "pool",
      "(none)",
      "no --proxmox-pool: clones are created outside any pool, so the token needs its VM " +
        "rights on /vms, propagated (see the privileges check)",
      "create a pool for the provider's VMs and run with --proxmox-pool (chart: proxmox.pool); " +
        "setup-token.sh --pool POOL creates it and grants the rights on it",
    )];
  }
  const list = await run.api.get<unknown[]>("/pools", undefined, run.signal);
  if (
    (Array.isArray(list) ? list : []).some((e) => (e as { poolid?: unknown })?.poolid === pool)
  ) {
    return [pass("pool", pool, "exists")];
  }
  const audit = (await run.perms.at(`/pool/${pool}`)).has("Pool.Audit");
  return [failed(
    "pool",
    pool,
    audit
      ? "does not exist: every clone would be refused (403 pool does not exist)"
      : `not visible to the token: it does not exist, or the token lacks Pool.Audit on /pool/${pool}`,
    audit
      ? `create it (pveum pool add ${pool}, or setup-token.sh --pool ${pool}), or correct --proxmox-pool`
      : `create it or correct --proxmox-pool; setup-token.sh --pool ${pool} creates it and grants Pool.Audit`,
  )];
}
