// SIGTERM with a request in flight: a 3 MiB Configure is still uploading
// (through a throttled proxy) when the signal arrives. /readyz and gRPC
// health must say not serving while it is in flight, the Configure (begun
// before the signal, so not refused) must then succeed and its transition
// finish, the process exit 0, and the same --state reopen it CONFIGURED.
// The Configure and the health watcher run as helper processes (see
// fixtures/slow_configure.ts for why).

import assert from "node:assert/strict";
import { Harness, MachineState } from "../harness/mod.ts";
import { httpGet, spawnFixture, startWithMetrics, waitFor } from "./helpers.ts";
import { startThrottleProxy } from "./throttle_proxy.ts";

const BLOB_BYTES = 3 * 1024 * 1024;
const RATE = 1024 * 1024; // bytes/s: the upload takes about three seconds
const SERVICE = "bigfleet.v1alpha1.CapacityProvider";

Deno.test("shutdown: SIGTERM lets an in-flight Configure finish, exits 0, state reopens", async () => {
  const dir = await Deno.makeTempDir({ prefix: "server-shutdown-" });
  const state = `${dir}/state.kv`;
  const args = ["--seed-count=4", `--state=${state}`, "--provider=shutdown"];
  const proc = await startWithMetrics(args);
  const proxy = startThrottleProxy(proc.port, RATE);
  try {
    const h = new Harness(proc.addr);
    const w = await h.walkToIdle();
    h.close();
    assert.equal((await httpGet(proc.metricsPort, "/readyz")).status, 200);

    const events: string[] = [];
    const watcher = spawnFixture("health_watch.ts", [proc.addr, SERVICE], (status) => {
      if (status === "NOT_SERVING") events.push("health NOT_SERVING");
    });
    await waitFor("health SERVING", () => watcher.lines.includes("SERVING") || undefined);
    const configure = spawnFixture("slow_configure.ts", [
      `127.0.0.1:${proxy.port}`,
      w.id,
      String(BLOB_BYTES),
    ]);
    configure.done.then(() => events.push("configure answered"));
    const exited = proc.exited.then((s) => {
      events.push("process exited");
      return s;
    });

    // Part of the blob is through: the call is on the wire, not finished.
    await waitFor("upload under way", () => proxy.upstreamBytes > 512 * 1024 || undefined);
    proc.kill("SIGTERM");
    const readyz = await waitFor("readyz 503", async () => {
      const r = await httpGet(proc.metricsPort, "/readyz");
      return r.status === 503 ? r : undefined;
    }, 2_000);
    assert.equal(readyz.body, "not ready");
    await waitFor("health NOT_SERVING", () => events.length > 0 || undefined, 2_000);
    assert.ok(proxy.upstreamBytes < BLOB_BYTES, "not serving while the upload is in flight");
    assert.deepEqual(events, ["health NOT_SERVING"], "the Configure is still in flight");

    const answered = await configure.done;
    assert.deepEqual(JSON.parse(answered.lines[0]), { ok: true }, answered.stderr);
    assert.equal(answered.code, 0, answered.stderr);
    const status = await exited;
    assert.equal(status.code, 0, proc.stderr());
    // The client fixture is another process: it may notice its answer after
    // the provider has exited, so only "NOT_SERVING came first" is ordered
    // here; the provider's own log below orders the answer before the exit.
    assert.equal(events[0], "health NOT_SERVING");
    assert.deepEqual([...events].sort(), [
      "configure answered",
      "health NOT_SERVING",
      "process exited",
    ]);
    assert.equal((await watcher.done).lines.at(-1), "END 14", "the watch stream was closed");
    const log = proc.stderr();
    assert.ok(log.indexOf("shutting down") < log.indexOf('"method":"Configure"'));
    assert.ok(log.indexOf('"method":"Configure"') < log.indexOf('"message":"stopped"'));
  } finally {
    await proxy.close();
    await proc.stop();
  }

  // The same state file: the change is there.
  const again = await startWithMetrics(args);
  const h2 = new Harness(again.addr);
  try {
    const list = await h2.list();
    const m = list.machines.find((x) => x.cluster === "cluster-after-sigterm");
    assert.ok(m, "the configured machine survived the restart");
    assert.deepEqual({ ...m.shard_metadata }, { kept: "yes" });
    // The Configure began before the signal, so it was accepted, and the stop
    // waited for its transition (docs/install.md#upgrades-and-restarts).
    assert.equal(m.state, MachineState.CONFIGURED, m.last_error);
  } finally {
    h2.close();
    await again.stop();
  }
});

Deno.test("shutdown: SIGINT on an idle provider exits 0 promptly", async () => {
  const proc = await startWithMetrics(["--seed-count=4"]);
  const t0 = performance.now();
  proc.kill("SIGINT");
  const status = await proc.exited;
  assert.equal(status.code, 0, proc.stderr());
  assert.ok(performance.now() - t0 < 5_000);
});

Deno.test("shutdown: SIGTERM lets a running transition finish before the state is closed", async () => {
  const dir = await Deno.makeTempDir({ prefix: "server-shutdown-transition-" });
  const args = ["--seed-count=4", `--state=${dir}/state.kv`, "--fake-delay=1500ms"];
  const proc = await startWithMetrics(args);
  let id = "";
  try {
    const h = new Harness(proc.addr);
    id = (await h.pickSpeculative()).id;
    const ack = await h.create(id);
    assert.equal(ack.machine?.state, MachineState.CREATING);
    h.close();
    proc.kill("SIGTERM");
    const status = await proc.exited;
    assert.equal(status.code, 0, proc.stderr());
    assert.match(proc.stderr(), /waiting up to \d+ ms for 1 running transitions/);
  } finally {
    await proc.stop();
  }
  // Without the wait the restart would report the Create as interrupted (FAILED).
  const again = await startWithMetrics(args);
  const h2 = new Harness(again.addr);
  try {
    const m = await h2.get(id);
    assert.equal(m.state, MachineState.IDLE, m.last_error);
    assert.ok(m.host?.ref, "the host found by the Create was kept");
  } finally {
    h2.close();
    await again.stop();
    await Deno.remove(dir, { recursive: true });
  }
});
