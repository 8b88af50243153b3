// The room part of preflight: which instance types fit which nodes today
// (docs/cli.md#preflight), counted exactly as the serving provider counts it
// (the same listing, the same `onboot` reads, the same policy). A type that
// fits is a PASS with how many more; one that does not is a WARN saying why:
// its Creates there are refused until room is made, or for good.

import { readOnboot, refreshRoom } from "../cluster/room_read.ts";
import { type CheckResult, pass, warn } from "./result.ts";
import type { PreflightRun } from "./run.ts";

const CHECK = "room";

export async function roomChecks(run: PreflightRun): Promise<CheckResult[]> {
  const { room } = run.ctx;
  await refreshRoom(run.ctx, run.signal);
  await readOnboot(run.ctx, run.signal);
  const out: CheckResult[] = [];
  for (const z of room.report()) {
    if (z.problem !== "") {
      out.push(
        warn(CHECK, z.zone, z.problem, `every Create in zone ${z.zone} is refused until then`),
      );
      continue;
    }
    const free = `${z.memoryMib.free} MiB and ${z.vcpus.free ?? "any number of"} vCPUs free ` +
      `(guests hold ${z.memoryMib.held} of ${z.memoryMib.capacity} MiB under the policy)`;
    for (const [name, fits] of Object.entries(z.fits)) {
      const subject = `${name} in ${z.zone}`;
      if (fits > 0) {
        out.push(pass(CHECK, subject, `${fits} more fit now: ${free}`));
        continue;
      }
      const never = room.neverFits(run.cfg.catalog.get(name)!, z.zone);
      out.push(
        never !== null
          ? warn(
            CHECK,
            subject,
            `never fits: ${never}`,
            "make the type smaller, offer it " +
              "on a larger node, or change --proxmox-memory-reserve / --proxmox-memory-overcommit",
          )
          : warn(
            CHECK,
            subject,
            `no room now: ${free}`,
            `its Creates in zone ${z.zone} are ` +
              "refused until VMs there stop or move, or the policy allows more " +
              "(docs/configuration.md#node-capacity)",
          ),
      );
    }
  }
  return out;
}
