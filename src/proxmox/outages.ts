// Which nodes are down, as the last passes found them: each outage is logged
// once when it starts and once when it ends, however many passes meet it.

import { getLogger } from "@logtape/logtape";

const log = getLogger(["bigfleet", "proxmox"]);

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
