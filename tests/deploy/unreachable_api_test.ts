// What docs/credentials.md (§ TLS trust for the Proxmox API) promises about an
// API that cannot be reached at startup, checked on the real binary: without
// a saved fleet the process exits 1 (it must list the cluster's VMs first);
// with one it serves and reconcile keeps retrying.

import assert from "node:assert/strict";
import { Harness } from "../harness/mod.ts";
import { fakeProviderArgs, freePort, runUntilExit, startProvider } from "../harness/process.ts";
import { httpGet, logLines, sample, scrape, startWithMetrics, waitFor } from "../server/helpers.ts";

const PIN = Array(32).fill("AB").join(":");

async function realArgs(dir: string): Promise<string[]> {
  const token = `${dir}/token`;
  await Deno.writeTextFile(token, "00000000-0000-0000-0000-000000000000\n");
  // A port nothing listens on: connections are refused at once.
  const port = freePort();
  return [
    `--proxmox-api-url=https://127.0.0.1:${port}/api2/json`,
    "--proxmox-token-id=bigfleet@pve!test",
    `--proxmox-token-file=${token}`,
    `--proxmox-tls-fingerprint=${PIN}`,
    "--nodes=pve1",
  ];
}

Deno.test("startup: an unreachable API without a saved fleet exits 1 after the listing fails", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const port = freePort();
    const res = await runUntilExit(
      [`--addr=127.0.0.1:${port}`, "--metrics-addr=", ...(await realArgs(dir))],
      { timeoutMs: 60_000, watchPort: port },
    );
    assert.equal(res.code, 1, res.stderr);
    assert.equal(res.served, false, "never served");
    const lines = logLines(res.stderr);
    assert.ok(
      lines.some((l) =>
        l.level === "WARN" &&
        String(l.message).startsWith("could not reach the Proxmox API for a TLS check")
      ),
      "the trust probe's failure to connect is only a warning",
    );
    const last = res.stderr.trim().split("\n").at(-1) ?? "";
    assert.match(
      last,
      /^error: proxmox GET \/cluster\/resources: connection to 127\.0\.0\.1:\d+ failed/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("startup: an unreachable API with a saved fleet serves, and reconcile keeps failing", async () => {
  const dir = await Deno.makeTempDir();
  const state = `${dir}/state.kv`;
  try {
    // A fleet saved by an earlier run (any backend writes the same state), with
    // the same offerings, so the restart has no capacity change to apply.
    const offerings = `${dir}/offerings.json`;
    await Deno.writeTextFile(
      offerings,
      JSON.stringify([{ instance_type: "pve.small", zone: "pve1", count: 4 }]),
    );
    const first = await startProvider({
      args: fakeProviderArgs({
        seed: 0,
        state,
        provider: "proxmox",
        extra: [`--offerings=${offerings}`],
      }),
    });
    const h = new Harness(first.addr);
    const saved = (await h.list()).machines.length;
    h.close();
    await first.stop();
    assert.ok(saved > 0);

    const proc = await startWithMetrics(
      [
        `--state=${state}`,
        `--offerings=${offerings}`,
        "--reconcile-interval=200ms",
        ...(await realArgs(dir)),
      ],
      { real: true },
    );
    const h2 = new Harness(proc.addr);
    try {
      assert.equal((await httpGet(proc.metricsPort, "/readyz")).status, 200);
      assert.equal((await h2.list()).machines.length, saved, "serves the saved fleet");
      await waitFor("a failed reconcile pass", async () => {
        const s = await scrape(proc.metricsPort);
        return sample(s, "bigfleet_proxmox_reconcile_total", { outcome: "error" }) >= 2
          ? true
          : undefined;
      }, 30_000);
    } finally {
      h2.close();
      await proc.stop();
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
