// The simulator as an operator starts it (`deno task pvesim`, docs/try-it.md):
// --help prints its flags and starts nothing; a bad flag is one line and exit
// 2; it prints the provider flags that reach it, they work, and SIGTERM
// stops it and removes its PKI folder.

import assert from "node:assert/strict";
import { spawnStandalone } from "./standalone.ts";
import { cli, lines } from "../cli/helpers.ts";

const TASK = [Deno.execPath(), "task", "--quiet", "pvesim"];
async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}

Deno.test("pvesim: --help prints the flags and starts no simulator; a bad flag exits 2", async () => {
  const r = await cli(["--help"], { cmd: TASK, timeoutMs: 20_000 });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^Usage: deno task pvesim \[flags\]/);
  for (
    const flag of [
      "--port",
      "--nodes",
      "--secret",
      "--cert-dir",
      "--slow",
      "--time-scale",
      "--pve-version",
      "--cut-nodes",
      "--cut-mode",
    ]
  ) {
    assert.ok(r.stdout.includes(flag), flag);
  }
  assert.ok(!r.stdout.includes("listening"), "no simulator was started");
  const bad = await cli(["--prot=8006"], { cmd: TASK, timeoutMs: 20_000 });
  assert.equal(bad.code, 2);
  assert.deepEqual(lines(bad.stderr), ["error: unknown flag --prot (did you mean --port?)"]);
});

Deno.test("pvesim: its printed provider flags reach it; SIGTERM stops it and removes its PKI folder", async () => {
  const sim = await spawnStandalone(["--port=0"]);
  try {
    assert.ok(await exists(sim.pki), "the PKI folder exists while it runs");
    // The flags are enough for the real backend: preflight's connection checks pass.
    const pre = await cli(["preflight", ...sim.flags, "-o", "json"], { timeoutMs: 60_000 });
    const report = JSON.parse(pre.stdout);
    for (const check of ["api", "token", "node"]) {
      const results = report.checks.filter((c: { check: string }) => c.check === check);
      assert.ok(results.length > 0, check);
      assert.ok(
        results.every((c: { status: string }) => c.status === "PASS"),
        JSON.stringify(results),
      );
    }
    sim.child.kill("SIGTERM");
    const status = await sim.child.status;
    assert.equal(status.code, 0, "a clean stop");
    assert.equal(await exists(sim.pki), false, `${sim.pki} is removed`);
  } finally {
    try {
      sim.child.kill("SIGKILL");
    } catch { /* gone */ }
  }
});

Deno.test("pvesim: --pve-version 9.2.11 and --cut-nodes pve2 --cut-mode daemons; a first node to cut exits 2", async () => {
  const sim = await spawnStandalone([
    "--port=0",
    "--pve-version=9.2.11",
    "--cut-nodes=pve2",
    "--cut-mode=daemons",
  ]);
  try {
    assert.match(sim.out, /^pve version: +9\.2\.11$/m);
    assert.match(sim.out, /^cut off: +pve2 \(daemons\)$/m);
    const flag = (name: string) =>
      sim.flags.find((f) => f.startsWith(`--${name}=`))!.slice(name.length + 3);
    const secret = (await Deno.readTextFile(flag("proxmox-token-file"))).trim();
    const client = Deno.createHttpClient({
      caCerts: [await Deno.readTextFile(flag("proxmox-ca-file"))],
    });
    try {
      const get = (path: string) =>
        fetch(flag("proxmox-api-url") + path, {
          client,
          headers: { Authorization: `PVEAPIToken=${flag("proxmox-token-id")}=${secret}` },
        });
      const version = await get("/version");
      assert.equal((await version.json()).data.version, "9.2.11");
      const cut = await get("/nodes/pve2/status");
      assert.equal(cut.status, 595);
      assert.equal(await cut.text(), "");
    } finally {
      client.close();
    }
  } finally {
    sim.child.kill("SIGTERM");
    await sim.child.status;
  }
  const bad = await cli(["--cut-nodes=pve1"], { cmd: TASK, timeoutMs: 20_000 });
  assert.equal(bad.code, 2);
  assert.deepEqual(lines(bad.stderr), [
    "error: --cut-nodes: pve1 is not one of --nodes after the first",
  ]);
});
