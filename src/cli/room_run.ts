// The work of `machines room` (flags and help: room.ts).

import { oneLine } from "../config/errors.ts";
import { ConfigError } from "../config/types.ts";
import type { ZoneRoom } from "../kit/backend.ts";
import type { AdminAnswer } from "../server/admin_wire.ts";
import { type AdminFlagValues, adminTarget } from "./admin_flags.ts";
import { adminCall, AdminFailure } from "../client/admin_client.ts";
import {
  type Context,
  EXIT_FAILURE,
  EXIT_OK,
  EXIT_USAGE,
  fail,
  parseCommandArgs,
  write,
} from "./command.ts";
import { ROOM_FLAGS } from "./room.ts";

type Roomed = AdminAnswer & { ok: true; op: "room" };

export async function runRoom(args: string[], ctx: Context): Promise<number> {
  const p = parseCommandArgs(ROOM_FLAGS, args, ctx);
  if (typeof p === "number") return p;
  const format = p.values.output;
  if (format !== "table" && format !== "json") {
    return fail(`-o ${JSON.stringify(format)}: want table or json`, EXIT_USAGE);
  }
  let zones: ZoneRoom[];
  try {
    const target = adminTarget(p.values as unknown as AdminFlagValues);
    const reply = await adminCall<Roomed>(target, { op: "room" });
    reply.conn.close();
    zones = reply.answer.zones;
  } catch (e) {
    if (e instanceof ConfigError) return fail(e.message, EXIT_USAGE);
    if (!(e instanceof AdminFailure)) throw e;
    return fail(oneLine(e.message), EXIT_FAILURE);
  }
  write(format === "json" ? JSON.stringify({ zones }, null, 2) + "\n" : table(zones));
  return EXIT_OK;
}

/** One row per zone; a zone that cannot be judged says why instead of figures. */
export function table(zones: readonly ZoneRoom[]): string {
  const rows = [["ZONE", "MEMORY FREE", "MEMORY HELD", "VCPUS FREE", "VCPUS HELD", "FITS"]];
  const notes: string[] = [];
  for (const z of zones) {
    const fits = Object.entries(z.fits).map(([t, n]) => `${t}=${n}`).join(" ") || "-";
    if (z.problem !== "") {
      rows.push([z.zone, "-", "-", "-", "-", fits]);
      notes.push(`${z.zone}: ${z.problem}`);
      continue;
    }
    const cap = z.vcpus.capacity === null ? "no bound" : String(z.vcpus.capacity);
    rows.push([
      z.zone,
      `${z.memoryMib.free} MiB`,
      `${z.memoryMib.held}/${z.memoryMib.capacity} MiB`,
      z.vcpus.free === null ? "no bound" : String(z.vcpus.free),
      `${z.vcpus.held}/${cap}`,
      fits,
    ]);
  }
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  const lines = rows.map((r) => r.map((c, i) => c.padEnd(widths[i])).join("  ").trimEnd());
  return [...lines, ...notes].join("\n") + "\n";
}
