// Who may see a task (pve-manager API2/Tasks.pm, the same in 8.x and 9.x):
// its owner, the UPID's user field, which for a token is the full token id,
// or anyone holding Sys.Audit on /nodes/<node>. So another token of the same
// user gets `403 Permission check failed (/nodes/<node>, Sys.Audit)` on a
// task's status and log, and the node's task list (`source=active` too)
// leaves its tasks out; seen on real PVE 8.4 and 9.2.11 after a token
// rotation. Every token holds the ACL model's privileges (faults.acl; none
// set grants everything, so then every token sees every task).

import { hasPriv, requirePriv } from "./acl.ts";
import type { SimCore } from "./router.ts";
import type { SimTask } from "./types.ts";

/** Whether `authid` may see task `t` (node_tasks' filter). */
export function maySeeTask(core: SimCore, authid: string, t: SimTask): boolean {
  const acl = core.faults.acl;
  return t.user === authid || acl === null || hasPriv(acl, `/nodes/${t.node}`, "Sys.Audit");
}

/** read_task_log / read_task_status: 403 for a task of someone else without Sys.Audit. */
export function checkTaskAccess(core: SimCore, authid: string, t: SimTask): void {
  if (t.user !== authid) requirePriv(core, `/nodes/${t.node}`, "Sys.Audit");
}
