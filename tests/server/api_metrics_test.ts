// The Proxmox API metrics of a real provider process on the real backend,
// talking to the simulator: boot describes, Create clones and waits for the
// agent, a failing bootstrap hook counts as a Configure error.

import assert from "node:assert/strict";
import { startSimulator } from "../pvesim/mod.ts";
import { Harness, MachineState } from "../harness/mod.ts";
import { logLines, sample, scrape, startWithMetrics, waitFor, waitForServing } from "./helpers.ts";

const P = "bigfleet_proxmox_";

Deno.test("api metrics: ops and outcomes from the real backend against the simulator", async () => {
  const sim = await startSimulator();
  const secretFile = await Deno.makeTempFile();
  await Deno.writeTextFile(secretFile, sim.tokenSecret);
  const proc = await startWithMetrics([
    "--proxmox-backend=proxmox",
    `--proxmox-api-url=${sim.url}`,
    `--proxmox-token-id=${sim.tokenId}`,
    `--proxmox-token-file=${secretFile}`,
    `--proxmox-ca-file=${sim.caFile}`,
    "--proxmox-pool=bigfleet",
    "--nodes=pve1,pve2",
    "--seed-count=4",
    "--reconcile-interval=0",
  ], { real: true });
  const h = new Harness(proc.addr);
  try {
    const w = await h.walkToIdle();
    sim.faults.bootstrapExitCode = 3;
    await h.configure(w.id, "c1");
    await h.mustReach(w.id, MachineState.FAILED);

    const s = await waitFor("Configure error counted", async () => {
      const s = await scrape(proc.metricsPort);
      return sample(s, `${P}api_calls_total`, { op: "Configure", outcome: "error" }) > 0
        ? s
        : undefined;
    });
    const calls = (op: string, outcome: string) =>
      sample(s, `${P}api_calls_total`, { op, outcome });
    assert.ok(calls("DescribeManaged", "ok") >= 1, "boot inventory described");
    assert.equal(calls("CloneVM", "ok"), 1);
    assert.ok(calls("EnsureRunning", "ok") >= 1);
    assert.equal(calls("Configure", "error"), 1);
    assert.equal(sample(s, `${P}api_duration_seconds_count`, { op: "CloneVM" }), 1);
    assert.ok(sample(s, `${P}api_duration_seconds_sum`, { op: "CloneVM" }) > 0);
    // The token secret appears in no metric or log line.
    assert.ok(!proc.stderr().includes(sim.tokenSecret));
    const text = await (await fetch(`http://127.0.0.1:${proc.metricsPort}/metrics`)).text();
    assert.ok(!text.includes(sim.tokenSecret));
    assert.equal((await waitForServing(proc)).proxmox_backend, "proxmox");
    // The failed Configure's landing: WARN, FAILED, its last_error and duration.
    const failed = (await h.get(w.id)).last_error;
    const line = await waitFor(
      "the FAILED line",
      () =>
        logLines(proc.stderr()).find((l) =>
          l.logger === "bigfleet.kit" && l.machineId === w.id && l.state === "FAILED"
        ),
    );
    assert.equal(line.level, "WARN");
    assert.equal(line.kind, "configure");
    assert.equal(line.error, failed);
    assert.ok(Number(line.dur_ms) > 0);
    assert.equal(line.message, `configure of ${w.id} failed after ${line.dur_ms} ms: ${failed}`);
    // The backend's own lines name the machine with the same field.
    const up = logLines(proc.stderr()).find((l) =>
      l.logger === "bigfleet.proxmox" &&
      String(l.message).includes(" is up for machine ")
    );
    assert.equal(up?.machineId, w.id);
  } finally {
    h.close();
    await proc.stop();
    await sim.close();
    await Deno.remove(secretFile);
  }
});
