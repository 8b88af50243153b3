// Each zone's room as the backend counts it under the operator's policy
// (docs/observability.md#node-capacity): free memory and vCPUs, whether the
// room is known at all, and how many more machines of each offered instance
// type fit now. Read from the backend at each scrape; nothing is kept here.

import { Gauge, type Registry } from "prom-client";
import type { ZoneRoom } from "../kit/backend.ts";

const PREFIX = "bigfleet_proxmox_";
const MIB = 1024 * 1024;

/** The per-zone gauges: name, help, and the value of one zone. */
const PER_ZONE: [string, string, (z: ZoneRoom) => number][] = [
  [
    "room_known",
    "1 when the zone's room is known; 0 when its node is offline, reports no status or its " +
    "figures are not visible to the token (then every Create there is refused).",
    (z) => z.problem === "" ? 1 : 0,
  ],
  [
    "room_free_memory_bytes",
    "Memory guests may still be given on the zone's node under the capacity policy.",
    (z) => z.memoryMib.free * MIB,
  ],
  [
    "room_free_vcpus",
    "vCPUs guests may still be given on the zone's node under the capacity policy " +
    "(+Inf: no bound on the sum).",
    (z) => z.vcpus.free ?? Infinity,
  ],
];

export function registerRoomMetrics(registers: Registry[], read: () => ZoneRoom[]): void {
  for (const [name, help, value] of PER_ZONE) {
    new Gauge({
      name: `${PREFIX}${name}`,
      help,
      labelNames: ["zone"] as const,
      registers,
      collect() {
        for (const z of read()) this.labels(z.zone).set(value(z));
      },
    });
  }
  new Gauge({
    name: `${PREFIX}room_fits`,
    help: "How many more machines of the instance type fit the zone's node now.",
    labelNames: ["zone", "instance_type"] as const,
    registers,
    collect() {
      for (const z of read()) {
        for (const [type, n] of Object.entries(z.fits)) this.labels(z.zone, type).set(n);
      }
    },
  });
}
