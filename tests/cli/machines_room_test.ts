// `machines room` (docs/cli.md#machines-room) through the real entrypoint,
// against a provider process on the Proxmox API simulator: each zone's room
// through the admin socket, as a table and as JSON; a zone whose node is
// offline says why; the fake backend counts no room.

import assert from "node:assert/strict";
import { startProvider } from "../harness/mod.ts";
import { providerRig } from "../proxmox/helpers.ts";
import { cli, lines } from "./helpers.ts";

const T = { sanitizeOps: false, sanitizeResources: false };

Deno.test({
  ...T,
  name: "machines room: each zone's free memory, vCPUs and what fits, as a table and as JSON",
  async fn() {
    await using r = await providerRig({ nodeResources: { pve1: { memoryMib: 24105, cpus: 8 } } });
    r.sim.addVm({ vmid: 500, name: "foreign", template: false, running: true, memory: 14463 });
    const p = await r.start(["--reconcile-interval=1s"]);
    const socket = `--admin-socket=${r.state}.admin`;
    try {
      const t = await cli(["machines", "room", socket]);
      assert.equal(t.code, 0, t.stderr);
      const out = lines(t.stdout);
      assert.match(out[0], /^ZONE +MEMORY FREE +MEMORY HELD +VCPUS FREE +VCPUS HELD +FITS$/);
      // The built-in offerings with --seed-count=4: one pve.large and one pve.xlarge per zone.
      assert.match(
        out[1],
        /^pve1 +7594 MiB +14463\/22057 MiB +\d+ +\d+\/32 +pve\.large=0 pve\.xlarge=0$/,
      );
      assert.match(
        out[2],
        /^pve2 +\d+ MiB +0\/522240 MiB +256 +0\/256 +pve\.large=31 pve\.xlarge=15$/,
      );

      const j = await cli(["machines", "room", socket, "-o", "json"]);
      assert.equal(j.code, 0, j.stderr);
      const { zones } = JSON.parse(j.stdout);
      assert.deepEqual(zones[0].memoryMib, { capacity: 22057, held: 14463, free: 7594 });
      assert.deepEqual(zones[0].fits, { "pve.large": 0, "pve.xlarge": 0 });

      r.sim.cutNode("pve2", "daemons");
      let offline = "";
      for (let i = 0; i < 100 && offline === ""; i++) {
        const o = await cli(["machines", "room", socket]);
        offline = lines(o.stdout).find((l) => l.startsWith("pve2:")) ?? "";
      }
      assert.equal(
        offline,
        "pve2: node pve2 is offline in the cluster: nothing is cloned there until it is back",
      );
      const bad = await cli(["machines", "room", socket, "-o", "yaml"]);
      assert.equal(bad.code, 2);
      assert.match(bad.stderr, /-o "yaml": want table or json/);
    } finally {
      await p.stop();
    }
  },
});

Deno.test({
  ...T,
  name: "machines room: the fake backend counts no room (exit 1); no socket is a usage error",
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "bf-room-cli-" });
    const p = await startProvider({ args: ["--use-fake-backend", `--state=${dir}/state.kv`] });
    try {
      const t = await cli(["machines", "room", `--admin-socket=${dir}/state.kv.admin`]);
      assert.equal(t.code, 1);
      assert.match(t.stderr, /counts no room \(the fake backend\)/);
      const none = await cli(["machines", "room"], { env: { BIGFLEET_ADMIN_SOCKET: "" } });
      assert.equal(none.code, 2);
      assert.match(none.stderr, /--admin-socket is required/);
    } finally {
      await p.stop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
