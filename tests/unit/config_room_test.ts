// --proxmox-memory-overcommit, --proxmox-memory-reserve, --proxmox-cpu-overcommit
// (docs/configuration.md#node-capacity): defaults, per-node overrides, and one
// line naming the flag and the fix for every bad value.

import assert from "node:assert/strict";
import { loadConfig } from "../../src/config/load.ts";
import { ConfigError } from "../../src/config/types.ts";

const CERT =
  "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ0VSVA==\n-----END CERTIFICATE-----\n";
const FILES: Record<string, string> = {
  "/t/token": "5e3c1f0a-aaaa-bbbb-cccc-0123456789ab\n",
  "/t/ca.pem": CERT,
};
const readFile = (path: string) =>
  path in FILES ? Promise.resolve(FILES[path]) : Promise.reject(new Error("no such file"));
const ARGV = [
  "--proxmox-api-url=https://pve1.example:8006/api2/json",
  "--proxmox-token-id=bigfleet@pve!autoscaler",
  "--proxmox-token-file=/t/token",
  "--proxmox-ca-file=/t/ca.pem",
  "--nodes=pve1,pve2,pve3",
];

async function policyOf(...flags: string[]) {
  const c = await loadConfig([...ARGV, ...flags], { readFile });
  return c.proxmox!.room;
}

async function refused(flag: string, re: RegExp): Promise<void> {
  await assert.rejects(loadConfig([...ARGV, flag], { readFile }), (e: unknown) => {
    assert.ok(e instanceof ConfigError, `not a ConfigError: ${e}`);
    assert.match(e.message, re);
    assert.ok(!e.message.includes("\n"), "one line");
    return true;
  });
}

Deno.test("node capacity flags: defaults are memory × 1.0 less 2 GiB, vCPUs × 4, on every node", async () => {
  const p = await policyOf();
  for (const node of ["pve1", "pve2", "pve3"]) {
    assert.deepEqual(p.get(node), {
      memoryOvercommit: 1,
      memoryReserve: { mib: 2048 },
      cpuOvercommit: 4,
    });
  }
});

Deno.test("node capacity flags: a default and NODE=VALUE overrides, or overrides alone", async () => {
  const p = await policyOf(
    "--proxmox-memory-overcommit=0.9,pve3=1.5",
    "--proxmox-memory-reserve=pve2=10%,pve3=4096MiB",
    "--proxmox-cpu-overcommit=0",
  );
  assert.deepEqual(p.get("pve1"), {
    memoryOvercommit: 0.9,
    memoryReserve: { mib: 2048 },
    cpuOvercommit: 0,
  });
  assert.deepEqual(p.get("pve2")?.memoryReserve, { percent: 10 });
  assert.deepEqual(p.get("pve3"), {
    memoryOvercommit: 1.5,
    memoryReserve: { mib: 4096 },
    cpuOvercommit: 0,
  });
  assert.deepEqual((await policyOf("--proxmox-memory-reserve=3Gi")).get("pve1")?.memoryReserve, {
    mib: 3072,
  });
});

Deno.test("node capacity flags: bad values stop startup in one line naming the flag and the fix", async () => {
  await refused(
    "--proxmox-memory-overcommit=0",
    /^--proxmox-memory-overcommit: want a ratio above 0 and at most 10 \(1\.0: physical memory\), got "0"$/,
  );
  await refused("--proxmox-memory-overcommit=lots", /^--proxmox-memory-overcommit: want a ratio/);
  await refused(
    "--proxmox-memory-reserve=2G",
    /^--proxmox-memory-reserve: want a size such as 2GiB or 1536MiB, or a share such as 10%, got "2G"$/,
  );
  await refused("--proxmox-memory-reserve=100%", /below 100% of the node, got "100%"/);
  await refused(
    "--proxmox-cpu-overcommit=-1",
    /^--proxmox-cpu-overcommit: want a ratio from 0 \(no bound\) to 64 vCPUs per CPU, got "-1"$/,
  );
  await refused(
    "--proxmox-cpu-overcommit=4,pve9=2",
    /^--proxmox-cpu-overcommit: node "pve9" is not one of --nodes \(pve1,pve2,pve3\)$/,
  );
  await refused(
    "--proxmox-cpu-overcommit=pve1=2,pve1=3",
    /^--proxmox-cpu-overcommit: node "pve1" given twice$/,
  );
  await refused(
    "--proxmox-memory-overcommit=pve1=1.2,1.0",
    /^--proxmox-memory-overcommit: only the first value may stand alone, got "1\.0"$/,
  );
});
