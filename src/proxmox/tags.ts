// The tags a VM gets: --proxmox-tags (default `bigfleet`; `@machine` is the
// per-machine tag) in place of the template's, as far as the datacenter's
// tag policy lets the token change each one. Without Sys.Modify on / a token
// may add or remove only what `user-tag-access` allows (`free`, `list`,
// `existing`, `none`) and never a `registered-tags` entry; PVE names the
// first tag it refuses (`Permission check failed (/, Sys.Modify for
// modifying tag 'x')`). A refused tag is left as it is (not added, or kept
// on the VM), logged once and remembered for a while, so later Creates do
// not ask again. The machine is known by its marker, never by a tag
// (docs/proxmox-notes.md "Tag policy").

import { getLogger } from "@logtape/logtape";
import { ProxmoxApiError } from "./api/errors.ts";
import { resolveTags } from "./naming.ts";

const log = getLogger(["bigfleet", "proxmox"]);

const REFUSED_RE = /Sys\.Modify for modifying tag '([^']+)'/;
/** How long a refusal is remembered: a policy fixed meanwhile is used within this. */
const REMEMBER_MS = 10 * 60_000;

export class TagPolicy {
  /** tag → until when it counts as refused. */
  readonly #refused = new Map<string, number>();

  constructor(readonly configured: readonly string[]) {}

  #isRefused(tag: string, now: number): boolean {
    const until = this.#refused.get(tag);
    if (until === undefined) return false;
    if (until > now) return true;
    this.#refused.delete(tag);
    return false;
  }

  /**
   * The tags to give a VM that carries `current` now: the configured ones
   * instead of the others, except that a tag known to be refused keeps its
   * current state. Sorted, as PVE stores them.
   */
  target(current: readonly string[], machineId: string): string[] {
    const want = new Set(resolveTags(this.configured, machineId));
    const have = new Set(current);
    const now = Date.now();
    const out = new Set<string>();
    for (const tag of new Set([...want, ...have])) {
      const keep = want.has(tag) === have.has(tag) || this.#isRefused(tag, now)
        ? have.has(tag)
        : want.has(tag);
      if (keep) out.add(tag);
    }
    return [...out].sort();
  }

  /**
   * Whether a config PUT failed on the tag policy; if so the tag is
   * remembered as refused (logged when newly so), and the PUT may go again
   * without changing it.
   */
  refused(err: unknown, current: readonly string[]): boolean {
    if (!(err instanceof ProxmoxApiError) || err.status !== 403) return false;
    const tag = REFUSED_RE.exec(err.serverText)?.[1];
    if (tag === undefined) return false;
    if (!this.#isRefused(tag, Date.now())) {
      const removing = current.includes(tag);
      log.warn(
        "the datacenter's tag policy does not let the token {change} tag '{tag}' ({error}); " +
          "{outcome}. VMs are known by their marker, so this costs only the tag; to allow it, " +
          "add it to user-allow-list (Datacenter > Options > User Tag Access, pvesh set " +
          "/cluster/options --user-tag-access ...) or grant Sys.Modify on /{config}",
        {
          tag,
          change: removing ? "remove" : "add",
          outcome: removing ? "it stays on the VMs that inherit it" : "VMs go without it",
          config: removing ? "" : ", or leave it out of --proxmox-tags",
          error: err.serverText,
        },
      );
    }
    this.#refused.set(tag, Date.now() + REMEMBER_MS);
    return true;
  }
}
