// Fault lane, B701–B708, in-process: our kit (startApp) around the fault
// backend, 2 s transition timeouts (the faultprovider's --transition-timeout),
// driven over real gRPC on loopback. Slots mirror the faultprovider: 64 normal
// ones plus 8 labelled conformance.fault/create=error.

import assert from "node:assert/strict";
import { loadConfig } from "../../src/config/load.ts";
import { type App, startApp } from "../../src/app.ts";
import {
  assertNonFpRejection,
  assertOk,
  atExit,
  freePort,
  Harness,
  type Machine,
  MachineState as St,
  outcome,
  stateName,
  withBudget,
} from "../harness/mod.ts";
import { createFaultBackend, type FaultBackend } from "./fault_backend.ts";

const TIMEOUT_MS = 2_000;
const FAULT_LABEL = "conformance.fault/create";
// Off by design: the in-process provider is shared by every test of the lane.
const opts = { sanitizeOps: false, sanitizeResources: false };

const lane: {
  app?: App;
  dir?: string;
  addr?: string;
  backend?: FaultBackend;
  forgetDir?: () => void;
} = {};

/** Boot the in-process provider once, in the first test that needs it. */
async function harness(): Promise<Harness> {
  if (!lane.addr) {
    const dir = lane.dir = await Deno.makeTempDir({ prefix: "bfconf-fault-" });
    // The provider lives in this process and dies with it; its files are removed
    // at exit even when a --filter skips the stop test below.
    lane.forgetDir = atExit(() => Deno.removeSync(dir, { recursive: true }));
    const offerings = `${lane.dir}/offerings.json`;
    await Deno.writeTextFile(
      offerings,
      JSON.stringify([
        { instance_type: "pve.large", zone: "fault-zone-a", count: 64 },
        {
          instance_type: "pve.small",
          zone: "fault-zone-b",
          count: 8,
          labels: { [FAULT_LABEL]: "error" },
        },
      ]),
    );
    const config = await loadConfig([
      `--addr=127.0.0.1:${freePort()}`,
      "--provider=fault",
      "--use-fake-backend",
      `--offerings=${offerings}`,
      "--metrics-addr=",
      "--reconcile-interval=0",
    ]);
    const createFaults = new Set(
      config.slots.filter((s) => s.labels.some(([k, v]) => k === FAULT_LABEL && v === "error"))
        .map((s) => s.id),
    );
    assert.equal(createFaults.size, 8, "the offerings should yield 8 create-fault slots");
    lane.backend = createFaultBackend({
      createFaults,
      transitionTimeoutMs: TIMEOUT_MS,
    });
    lane.app = await startApp(config, {
      backend: lane.backend,
      timeouts: {
        create: TIMEOUT_MS,
        configure: TIMEOUT_MS,
        drain: TIMEOUT_MS,
        delete: TIMEOUT_MS,
      },
    });
    lane.addr = `127.0.0.1:${lane.app.grpcPort}`;
  }
  return new Harness(lane.addr);
}

/** Speculative machines whose create label is (or is not) `error`. */
async function pick(h: Harness, faulty: boolean): Promise<string> {
  const l = await h.list({ states: [St.SPECULATIVE] });
  const m = l.machines.find((x) => (x.labels?.[FAULT_LABEL] === "error") === faulty);
  assert.ok(m, `no ${faulty ? "create-fault" : "healthy"} Speculative machine left`);
  return m.id;
}

async function walkToIdle(h: Harness): Promise<string> {
  const id = await pick(h, false);
  assertOk(await outcome(h.create(id)), "Create");
  await h.mustReach(id, St.IDLE);
  return id;
}

/** Configure onto a fault cluster (accepted), then FAILED with a last_error. */
async function failVia(
  h: Harness,
  id: string,
  cluster: string,
  withinMs: number,
): Promise<Machine> {
  assertOk(await outcome(h.configure(id, cluster)), `Configure ${cluster}`);
  const m = await h.mustReach(id, St.FAILED, withinMs);
  assert.notEqual(m.last_error, "", "FAILED without last_error");
  return m;
}

function faultTest(name: string, fn: (h: Harness) => Promise<void>) {
  Deno.test({
    name: `[fault] ${name}`,
    ...opts,
    async fn() {
      const h = await harness();
      try {
        await fn(h);
      } finally {
        h.close();
      }
    },
  });
}

faultTest("B701 a Configure actuator error ends FAILED with last_error", async (h) => {
  const id = await walkToIdle(h);
  await failVia(h, id, "fault-error", 7_000);
  await h.neverReaches(id, [St.CONFIGURING], 300);
});

faultTest("B702 a Create actuator error ends FAILED with last_error", async (h) => {
  const id = await pick(h, true);
  assertOk(await outcome(h.create(id)), "Create");
  const m = await h.mustReach(id, St.FAILED, 7_000);
  assert.notEqual(m.last_error, "", "FAILED without last_error");
  await h.neverReaches(id, [St.CREATING], 300);
});

faultTest("B703 a Configure that blocks until cancelled times out to FAILED", async (h) => {
  await failVia(h, await walkToIdle(h), "fault-timeout", 5_000);
});

faultTest("B704 a success that arrives after the timeout is discarded", async (h) => {
  const id = await walkToIdle(h);
  const failed = await failVia(h, id, "fault-slow-ok", 5_000);
  // The actuator reports success at timeout + 1 s; the Get after it is a
  // network round trip, so the kit has had its chance to (wrongly) apply it.
  await withBudget(5_000, "the late success", () => lane.backend!.lateSuccess(id));
  const g = await h.get(id);
  assert.equal(stateName(g.state), "FAILED", "the late success resurrected the machine");
  assert.notEqual(g.last_error, "");
  assert.equal(g.last_error, failed.last_error, "last_error changed after the late success");
});

faultTest(
  "B705 FAILED is terminal: Configure is a non-FP rejection, last_error unchanged",
  async (h) => {
    const id = await walkToIdle(h);
    const failed = await failVia(h, id, "fault-error", 7_000);
    assertNonFpRejection(await outcome(h.configure(id, "recover-cluster")), "Configure on FAILED");
    const g = await h.staysIn(id, St.FAILED, 300);
    assert.equal(g.last_error, failed.last_error, "last_error changed");
  },
);

// The catalog allows FAILED or IDLE; this provider's kit makes a failed Drain FAILED with the
// backend's error as last_error (docs/design.md#transitions-and-timeouts).
faultTest("B706 a Drain actuator error ends FAILED with the error as last_error", async (h) => {
  const id = await walkToIdle(h);
  assertOk(await outcome(h.configure(id, "fault-drain-error")), "Configure");
  await h.mustReach(id, St.CONFIGURED);
  assertOk(await outcome(h.drain(id, 0)), "Drain(0)");
  const g = await h.mustReach(id, St.FAILED, 7_000);
  assert.equal(g.last_error, "drain failed: injected drain fault (fault-drain-error)");
  await h.neverReaches(id, [St.DRAINING], 300);
});

faultTest("B707 a FAILED machine reads consistently through Get and List(FAILED)", async (h) => {
  const id = await walkToIdle(h);
  const failed = await failVia(h, id, "fault-error", 7_000);
  for (let i = 0; i < 3; i++) {
    const g = await h.get(id);
    assert.equal(stateName(g.state), "FAILED", `Get ${i}`);
    assert.equal(g.last_error, failed.last_error, `Get ${i}: last_error`);
  }
  const listed = (await h.list({ states: [St.FAILED] })).machines.find((m) => m.id === id);
  assert.ok(listed, "missing from List(FAILED)");
  assert.equal(listed.last_error, failed.last_error, "List last_error");
});

faultTest("B708 a blocked readiness gate never reports CONFIGURED and ends FAILED", async (h) => {
  const id = await walkToIdle(h);
  assertOk(await outcome(h.configure(id, "fault-readiness-block")), "Configure");
  await h.neverReaches(id, [St.CONFIGURED], 1_500);
  const m = await h.mustReach(id, St.FAILED, 7_000);
  assert.notEqual(m.last_error, "", "FAILED without last_error");
});

Deno.test({
  name: "[fault] stop the in-process provider",
  ...opts,
  async fn() {
    await lane.app?.stop();
    if (lane.dir) await Deno.remove(lane.dir, { recursive: true });
    lane.forgetDir?.();
  },
});
