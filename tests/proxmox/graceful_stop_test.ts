// A graceful stop through the real binary against the Proxmox API simulator
// (docs/install.md#upgrades-and-restarts): a Create whose clone takes 18 s is
// running when SIGTERM arrives. The process must keep answering Get and List,
// refuse new lifecycle calls with UNAVAILABLE, say not ready (but alive), and
// exit 0 only once the machine is IDLE and persisted, so the next start on the
// same --state serves it IDLE. A second SIGTERM, or --shutdown-timeout, still
// stops at once and leaves the Create FAILED, as the contract asks.

import assert from "node:assert/strict";
import { SAME_SIGNAL_MS } from "../../src/cli/serve.ts";
import { Harness, MachineState, sleep } from "../harness/mod.ts";
import { httpGet, waitFor } from "../server/helpers.ts";
import type { OpsProvider } from "../server/helpers.ts";
import { providerRig } from "./helpers.ts";
import type { ProviderRig } from "./helpers.ts";

/** Longer than the 15 s the provider used to wait for transitions before exiting. */
const CLONE_MS = 18_000;

function rig(): Promise<ProviderRig> {
  return providerRig({ timing: { cloneMs: CLONE_MS } });
}

/**
 * A provider with a Create acknowledged and its clone under way in the
 * simulator; `fn` drives the stop. Resolves with the machine id once the
 * process is gone.
 */
async function duringCreate(
  r: ProviderRig,
  extra: string[],
  fn: (p: OpsProvider, h: Harness, id: string) => Promise<void>,
): Promise<string> {
  const p = await r.start(extra);
  const h = new Harness(p.addr);
  try {
    const id = (await h.pickSpeculative()).id;
    const ack = await h.create(id);
    assert.equal(ack.machine?.state, MachineState.CREATING);
    await waitFor(
      "the clone is running",
      () => r.sim.vms().some((vm) => vm.config.lock === "clone") || undefined,
      10_000,
    );
    await fn(p, h, id);
    return id;
  } finally {
    h.close();
    await p.stop();
  }
}

async function servedAfterRestart(r: ProviderRig, id: string) {
  const again = await r.start();
  const h = new Harness(again.addr);
  try {
    return await h.get(id);
  } finally {
    h.close();
    await again.stop();
  }
}

Deno.test("graceful stop: SIGTERM, even delivered twice at once, waits for a running Create; reads go on, lifecycle calls are refused", async () => {
  await using r = await rig();
  const id = await duringCreate(r, [], async (p, h, id) => {
    const other = (await h.pickSpeculative()).id;
    // Ctrl-C under `deno task` reaches the provider twice, the group's and then the forwarded
    // one: the second arrives once the first was taken (two pending signals would be one).
    const first = performance.now();
    p.kill("SIGINT");
    await waitFor("the stop begins", () => /shutting down/.test(p.stderr()) || undefined, 5_000, 2);
    p.kill("SIGINT");
    assert.ok(performance.now() - first < SAME_SIGNAL_MS, "the second came within the window");
    await waitFor(
      "readyz 503",
      async () => (await httpGet(p.metricsPort, "/readyz")).status === 503 || undefined,
      5_000,
    );
    assert.equal((await httpGet(p.metricsPort, "/healthz")).status, 200, "alive while stopping");

    // While the clone runs: reads answered, a new lifecycle call refused, nothing changed by it.
    const seen = await h.get(id);
    assert.equal(seen.state, MachineState.CREATING);
    const listed = await h.list();
    assert.ok(listed.machines.some((m) => m.id === id), "List still answers");
    await assert.rejects(h.create(other), (e: { code: number; details: string }) => {
      assert.equal(e.code, 14, `UNAVAILABLE, got ${e.code} ${e.details}`);
      assert.match(e.details, /shutting down/);
      return true;
    });
    assert.equal(
      (await h.get(other)).state,
      MachineState.SPECULATIVE,
      "the refused Create did nothing",
    );
    assert.equal(p.exitStatus(), undefined, "still running while the clone runs");

    // Hang up before the provider closes its side: a client that takes the server's GOAWAY
    // with streams just closed can abort inside Deno's nghttp2 (denoland/deno#36788).
    h.close();
    const status = await p.exited;
    assert.equal(status.code, 0, p.stderr());
    // It exited after the Create finished: the VM is unlocked and running.
    const vm = r.sim.vms().find((v) => v.config.lock !== "clone" && v.status === "running");
    assert.ok(vm, "the clone finished and the VM runs before the process exited");
    assert.match(p.stderr(), /waiting up to \d+ ms for 1 running transitions/);
  });
  const m = await servedAfterRestart(r, id);
  assert.equal(m.state, MachineState.IDLE, m.last_error);
  assert.ok(m.host?.ref, "the host the Create made was persisted");
});

Deno.test("graceful stop: a second SIGTERM stops at once and the Create comes back FAILED", async () => {
  await using r = await rig();
  const id = await duringCreate(r, [], async (p, h) => {
    const first = performance.now();
    p.kill("SIGTERM");
    await waitFor(
      "the stop waits",
      () => /waiting up to \d+ ms for 1 running transitions/.test(p.stderr()) || undefined,
      5_000,
    );
    // An operator's second signal, not the first delivered twice (SAME_SIGNAL_MS).
    await sleep(Math.max(0, first + SAME_SIGNAL_MS + 50 - performance.now()));
    const t0 = performance.now();
    p.kill("SIGTERM");
    // Hang up before the provider closes its side: a client that takes the server's GOAWAY
    // with streams just closed can abort inside Deno's nghttp2 (denoland/deno#36788).
    h.close();
    const status = await p.exited;
    assert.equal(status.code, 1, p.stderr());
    assert.ok(performance.now() - t0 < 5_000, "stopped at once");
    assert.ok(r.sim.vms().some((v) => v.config.lock === "clone"), "the clone was still running");
    assert.match(p.stderr(), /1 transitions still running \(second signal\)/);
  });
  const m = await servedAfterRestart(r, id);
  assert.equal(m.state, MachineState.FAILED);
  assert.equal(m.last_error, "create transition interrupted by a provider restart; needs re-drive");
});

Deno.test("graceful stop: --shutdown-timeout bounds the wait; the Create comes back FAILED", async () => {
  await using r = await rig();
  const id = await duringCreate(r, ["--shutdown-timeout=1s"], async (p, h) => {
    const t0 = performance.now();
    p.kill("SIGTERM");
    // Hang up before the provider closes its side: a client that takes the server's GOAWAY
    // with streams just closed can abort inside Deno's nghttp2 (denoland/deno#36788).
    h.close();
    const status = await p.exited;
    assert.equal(status.code, 1, p.stderr());
    assert.ok(performance.now() - t0 < CLONE_MS / 2, "the timeout ended the wait, not the clone");
    assert.match(p.stderr(), /1 transitions still running \(shutdown timeout 1000 ms\)/);
  });
  const m = await servedAfterRestart(r, id);
  assert.equal(m.state, MachineState.FAILED);
  assert.match(m.last_error, /create transition interrupted by a provider restart/);
});
