// Which API calls a node's pvedaemon runs, so the provider can bound how
// many of its workers it occupies (docs/proxmox-notes.md "pvedaemon's three
// workers"). pveproxy answers most reads itself, but hands every `protected`
// method to the node's pvedaemon, which has 3 workers that each run one
// call at a time; a call that waits 30 s for one gets 596. The provider
// keeps at most --proxmox-calls-per-node of them in flight per node, so the
// operator (GUI, backups, other tools) always finds a free worker.

/** The reads below /nodes/<node> that pveproxy answers without pvedaemon. */
const UNPROTECTED_READ =
  /^\/nodes\/[^/]+(?:\/status|\/tasks|\/qemu\/\d+\/(?:config|pending|status))?$/;

/**
 * The node whose pvedaemon runs this call, or null when pveproxy answers it
 * itself. Below /nodes/<node>, every method but a few reads is protected in
 * qemu-server and pve-manager (status/current, task status and log, the VM
 * list, storage status, every agent call, every POST, PUT and DELETE);
 * cluster-wide calls (/cluster/resources, nextid, /storage, /version) are not.
 */
export function protectedNode(method: string, path: string): string | null {
  const m = /^\/nodes\/([^/]+)/.exec(path);
  if (m === null) return null;
  if (method === "GET" && UNPROTECTED_READ.test(path)) return null;
  return m[1];
}

/** An agent ping: while the guest boots, it holds its worker for the agent's 3 s timeout. */
export function isAgentPing(path: string): boolean {
  return /^\/nodes\/[^/]+\/qemu\/\d+\/agent\/ping$/.test(path);
}
