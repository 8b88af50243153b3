// Tokens a rotation retires (docs/credentials.md#rotating-the-token): such a
// token starts nothing new, but the tasks it started are read with it until
// they end. Once this process follows none of them and Proxmox lists none
// running on any node, the provider says so, once per token, so the
// operator knows `setup-token.sh --remove-old` loses nothing.

import { getLogger } from "@logtape/logtape";
import { pollUntil, pollWaits } from "../async/poll.ts";
import { sleep } from "../async/sleep.ts";
import type { ProxmoxContext } from "./context.ts";
import { clusterNodes } from "./cluster/nodes.ts";
import { ProxmoxApiError } from "./api/errors.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/** How a running task of a retiring token is followed (it may be a long clone). */
const FOLLOW = { initialMs: 1_000, maxMs: 10_000 };
/** Waits before asking again when some node could not be asked. */
const RETRY = { initialMs: 5_000, maxMs: 60_000 };

/** Watch the retiring tokens of `ctx`'s client until `stop`. */
export function watchRetiringTokens(ctx: ProxmoxContext): { stop(): void } {
  const ac = new AbortController();
  const { tokens } = ctx.api;
  const told = new Set<string>();
  const checking = new Set<string>();

  async function check(id: string): Promise<void> {
    if (told.has(id) || checking.has(id)) return;
    checking.add(id);
    try {
      for (const wait of pollWaits(RETRY)) {
        const running = await runningTasks(ctx, id, ac.signal);
        if (running === "refused") return void told.add(id);
        if (running === "unknown") {
          await sleep(wait, ac.signal);
          continue;
        }
        if (running.length === 0) break;
        for (const upid of running) await followTask(ctx, id, upid, ac.signal);
      }
      // Back in use meanwhile (the file switched back), or refused since: nothing to say.
      if (!tokens.ids().slice(1).includes(id)) return;
      told.add(id);
      log.info("token {tokenId} has no task in flight; setup-token.sh --remove-old may remove it", {
        tokenId: id,
      });
    } catch (err) {
      if (!ac.signal.aborted) {
        log.debug("could not check the tasks of token {tokenId}: {error}", {
          tokenId: id,
          error: (err as Error).message,
        });
      }
    } finally {
      checking.delete(id);
    }
  }

  tokens.onIdle((id) => void check(id));
  return { stop: () => ac.abort() };
}

/**
 * The running tasks token `id` started, on every node of the cluster that is
 * not offline; "refused" when Proxmox no longer accepts the token, "unknown"
 * when some node could not be asked.
 */
async function runningTasks(
  ctx: ProxmoxContext,
  id: string,
  signal: AbortSignal,
): Promise<string[] | "refused" | "unknown"> {
  let nodes: Map<string, string>;
  try {
    nodes = await clusterNodes(ctx.api, signal, 1);
  } catch (err) {
    if (signal.aborted) throw err;
    return "unknown";
  }
  const out: string[] = [];
  for (const [node, status] of nodes) {
    if (status === "offline") continue;
    let list: unknown;
    try {
      list = await ctx.api.get(`/nodes/${node}/tasks`, { source: "active", limit: 1000 }, signal, {
        as: id,
        only: true,
        attempts: 1,
      });
    } catch (err) {
      if (signal.aborted) throw err;
      if (err instanceof ProxmoxApiError && err.status === 401) return "refused";
      return "unknown";
    }
    for (const e of Array.isArray(list) ? list : []) {
      const t = e as Record<string, unknown>;
      if (t.status === "RUNNING" && t.user === id) out.push(String(t.upid));
    }
  }
  return out;
}

/** Wait until task `upid` of token `id` stops (or the token is refused: nobody can follow it then). */
async function followTask(
  ctx: ProxmoxContext,
  id: string,
  upid: string,
  signal: AbortSignal,
): Promise<void> {
  const node = upid.split(":")[1];
  const followed = ctx.api.tokens.follow(id);
  try {
    await pollUntil(signal, FOLLOW, async () => {
      try {
        const st = await ctx.api.get<Record<string, unknown>>(
          `/nodes/${node}/tasks/${upid}/status`,
          undefined,
          signal,
          { as: id, only: true },
        );
        return st?.status === "stopped" ? true : undefined;
      } catch (err) {
        if (err instanceof ProxmoxApiError && (err.status === 401 || err.status === 403)) {
          return true;
        }
        throw err;
      }
    });
  } finally {
    followed();
  }
}
