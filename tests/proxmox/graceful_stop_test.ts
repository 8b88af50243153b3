// A graceful stop through the real binary against the Proxmox API simulator
// (docs/install.md#upgrades-and-restarts): a Create whose clone takes 18 s is
// running when SIGTERM arrives. The process must keep answering Get and List,
// refuse new lifecycle calls with UNAVAILABLE, say not ready (but alive), and
// exit 0 only once the machine is IDLE and persisted, so the next start on the
// same --state serves it IDLE. A second SIGTERM, or --shutdown-timeout, still
// stops at once and leaves the Create FAILED, as the contract asks.

import assert from "node:assert/strict";
import { SAME_SIGNAL_MS } from "../../src/cli/serve.ts";
import { freePort, Harness, MachineState, sleep } from "../harness/mod.ts";
import { servingLine, spawnProvider } from "../harness/process.ts";
import { httpGet, waitFor } from "../server/helpers.ts";
import type { OpsProvider } from "../server/helpers.ts";
import { providerArgs, providerRig } from "./helpers.ts";
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

/**
 * A provider still starting: its first node list (GET /nodes) is held for
 * `holdMs` before a 596, and `fn` runs once the request has arrived.
 */
async function duringStartup(
  r: ProviderRig,
  holdMs: number,
  fn: (p: ReturnType<typeof spawnProvider>) => Promise<void>,
): Promise<void> {
  let asked = false;
  r.sim.faults.http596.push({ path: /^\/nodes$/, method: "GET", count: 1, delayMs: holdMs });
  r.sim.faults.onRequest = (method, path) => {
    if (method === "GET" && path === "/nodes") asked = true;
  };
  const args = [
    ...providerArgs(r.sim, r.tokenFile),
    `--state=${r.state}`,
    `--addr=127.0.0.1:${freePort()}`,
  ];
  const p = spawnProvider(args);
  try {
    await waitFor("the startup's node list", () => asked, 20_000);
    await fn(p);
  } finally {
    try {
      p.child.kill("SIGKILL");
    } catch { /* gone */ }
    await p.child.status;
    await p.pumped;
  }
}

Deno.test("graceful stop: a signal while the provider starts stops it once started, exit 0, not a kill", async () => {
  await using r = await rig();
  await duringStartup(r, 2_000, async (p) => {
    p.child.kill("SIGTERM");
    const status = await p.child.status;
    assert.equal(status.signal, null, `killed by ${status.signal}: ${p.stderr()}`);
    assert.equal(status.code, 0, p.stderr());
    assert.match(p.stderr(), /signal during startup: stopping as soon as the provider has started/);
    assert.ok(servingLine(p.stderr()) !== undefined, "it finished starting first");
  });
});

Deno.test("graceful stop: a second signal while the provider starts exits 1 at once", async () => {
  await using r = await rig();
  await duringStartup(r, 10_000, async (p) => {
    p.child.kill("SIGTERM");
    await waitFor(
      "the first signal noted",
      () => /signal during startup/.test(p.stderr()) || undefined,
      5_000,
    );
    await sleep(SAME_SIGNAL_MS + 50);
    const t0 = performance.now();
    p.child.kill("SIGTERM");
    const status = await p.child.status;
    assert.equal(status.code, 1, p.stderr());
    assert.ok(performance.now() - t0 < 5_000, "at once, not after the held node list");
    assert.match(p.stderr(), /error: second signal during startup; stopping now/);
    assert.equal(servingLine(p.stderr()), undefined, "it never served");
  });
});
