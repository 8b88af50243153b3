// The admin commands' flags (machines recover, state backup): where they find a running
// provider's admin socket (docs/security.md#the-admin-socket), and their one argument.

import { forFlag } from "../config/errors.ts";
import type { FlagTable, Parsed } from "../config/flags.ts";
import { ConfigError } from "../config/types.ts";
import type { AdminTarget } from "../client/admin_client.ts";
import { type Context, EXIT_USAGE, fail, parseCommandArgs, positiveDuration } from "./command.ts";

const ADMIN = "Admin socket";

export const ADMIN_FLAGS = {
  "admin-socket": {
    kind: "string",
    default: "",
    topic: ADMIN,
    arg: "PATH",
    none: "$BIGFLEET_ADMIN_SOCKET",
    help: "the provider's admin socket: its --state path with .admin appended",
  },
  timeout: {
    kind: "string",
    default: "10m",
    topic: ADMIN,
    arg: "DURATION",
    help: "how long to wait for the provider's answer",
  },
} as const;

export type AdminFlagValues = Parsed<typeof ADMIN_FLAGS>["values"];

/** The socket and deadline from the flags (or BIGFLEET_ADMIN_SOCKET); ConfigError when missing. */
export function adminTarget(v: AdminFlagValues): AdminTarget {
  const socket = v["admin-socket"] !== ""
    ? v["admin-socket"]
    : Deno.env.get("BIGFLEET_ADMIN_SOCKET") ?? "";
  if (socket === "") {
    throw new ConfigError(
      "--admin-socket is required: the provider's --state path with .admin appended " +
        "(e.g. /var/lib/bigfleet/state.kv.admin), or set BIGFLEET_ADMIN_SOCKET",
    );
  }
  return { socket, timeoutMs: forFlag("timeout", () => positiveDuration(v.timeout)) };
}

/**
 * An admin command's flags, its one argument (`what` names it in the usage
 * error) and the socket to ask; or the exit code to return at once.
 */
export function parseAdminCommand<T extends FlagTable>(
  table: T,
  args: readonly string[],
  ctx: Context,
  usage: string,
): { values: Parsed<T>["values"]; arg: string; target: AdminTarget } | number {
  const p = parseCommandArgs(table, args, ctx, { positionals: true });
  if (typeof p === "number") return p;
  if (p.positionals.length !== 1) {
    return fail(`${usage}, got ${p.positionals.length} arguments`, EXIT_USAGE);
  }
  try {
    return {
      values: p.values,
      arg: p.positionals[0],
      target: adminTarget(p.values as unknown as AdminFlagValues),
    };
  } catch (e) {
    if (e instanceof ConfigError) return fail(e.message, EXIT_USAGE);
    throw e;
  }
}
