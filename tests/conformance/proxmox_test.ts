// The same conformance suite, run against the REAL Proxmox backend: the
// provider process talks HTTPS to the Proxmox API simulator (tests/pvesim),
// which runs in this test process with CI-sized delays. Only the backend
// differs from the fake run; the contract must not.
//
// Two version modes: every behaviour against the simulator as Proxmox VE 8.4,
// and against it as Proxmox VE 9.2.11 the behaviours that touch what differs
// between the two (docs/proxmox-notes.md "Proxmox VE 9"): the clone (Create),
// the guest agent (Configure, Drain: ping, file-write, exec) and the destroy
// (Delete). The whole suite takes about 3 minutes per mode on 2 cores, so the
// PVE 9 lane runs that subset only (about a minute).

import { atExit, startProvider } from "../harness/mod.ts";
import { startSimulator } from "../pvesim/mod.ts";
import type { Simulator } from "../pvesim/mod.ts";
import { defineConformanceSuite } from "./suite.ts";

/** Behaviours that clone, talk to the guest agent or destroy: the PVE 9 lane. */
const PVE9_LANE = new Set([
  "baseline FullLifecycle",
  "baseline CreateIdempotent",
  "baseline ConfigureIdempotent",
  "baseline DrainIdempotent",
  "baseline DeleteIdempotent",
  "baseline DrainGraceTimeout",
  "baseline DeleteOnConfigured",
  "B101",
  "B109",
  "B401",
  "B403",
  "B407",
  "B409",
]);

/** One lane: the simulator as `pveVersion`, the provider on it, both stopped at the end. */
function lane(label: string, pveVersion: string, only?: ReadonlySet<string>): void {
  let sim: Simulator | undefined;
  let dir: string | undefined;
  let forgetDir: (() => void) | undefined;

  defineConformanceSuite(label, async () => {
    // Nodes that can hold every one of the 256 slots at once (64 × 16 GiB + 64 × 32 GiB per
    // zone): the contract is under test here, not node capacity (tests/proxmox/room_*).
    const roomy = { memoryMib: 4 * 1024 * 1024, cpus: 512 };
    sim = await startSimulator({
      nodes: ["pve1", "pve2"],
      pveVersion,
      nodeResources: { pve1: roomy, pve2: roomy },
    });
    const made = dir = await Deno.makeTempDir({ prefix: "bf-pve-conf-" });
    // Removed at exit even when a --filter skips the stop test below; the
    // simulator lives in this process and the provider child is killed by the harness.
    forgetDir = atExit(() => Deno.removeSync(made, { recursive: true }));
    const tokenFile = `${dir}/token`;
    await Deno.writeTextFile(tokenFile, `${sim.tokenSecret}\n`);
    return await startProvider({
      args: [
        "--provider=certify",
        `--proxmox-api-url=${sim.url}`,
        `--proxmox-token-id=${sim.tokenId}`,
        `--proxmox-token-file=${tokenFile}`,
        `--proxmox-ca-file=${sim.caFile}`,
        "--nodes=pve1,pve2",
        "--proxmox-pool=bigfleet",
        "--template-vmid=9000",
        "--seed-count=256",
        "--metrics-addr=",
      ],
    });
  }, {
    harness: { ownProvider: true },
    only: only === undefined ? undefined : (b) => only.has(b.id),
  });

  Deno.test({
    name: `[${label}] stop the simulator`,
    sanitizeOps: false,
    sanitizeResources: false,
    async fn() {
      await sim?.close();
      if (dir) await Deno.remove(dir, { recursive: true });
      forgetDir?.();
    },
  });
}

lane("proxmox-sim", "8.4.1");
lane("proxmox-sim-pve9", "9.2.11", PVE9_LANE);
