// /healthz and /readyz through boot, serving and shutdown; 404 elsewhere; a
// busy metrics port tolerated; an empty --metrics-addr disables the listener.

import assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { withGoawayFilter } from "../../src/client/goaway_credentials.ts";
import { createFakeBackend } from "../../src/fake/backend.ts";
import type { Backend } from "../../src/kit/backend.ts";
import type { Kit } from "../../src/kit/api.ts";
import { freePort, startProvider } from "../harness/process.ts";
import { Harness } from "../harness/mod.ts";
import { httpGet, logLines, RawClient, startTestApp, waitFor, waitForServing } from "./helpers.ts";

/** A backend that looks real, so the kit asks it for VMs at boot, and answers when told. */
function gatedBackend(): { backend: Backend; release: () => void } {
  const fake = createFakeBackend({ delayMs: 0 });
  const gate = Promise.withResolvers<void>();
  const backend: Backend = {
    kind: "proxmox",
    create: (s, sig) => fake.create(s, sig),
    configure: (m, s, sig) => fake.configure(m, s, sig),
    drain: (m, g, sig) => fake.drain(m, g, sig),
    delete: (m, sig) => fake.delete(m, sig),
    describe: async (sig) => {
      await gate.promise;
      return await fake.describe(sig);
    },
    inspect: (m, sig) => fake.inspect(m, sig),
    close: () => fake.close(),
  };
  return { backend, release: gate.resolve };
}

Deno.test("probes: healthz during boot, readyz 503 until serving, 503 from the start of shutdown", async () => {
  const metricsPort = freePort();
  const { backend, release } = gatedBackend();
  // A kit whose Get blocks until told, so a call is in flight at stop().
  const getGate = Promise.withResolvers<void>();
  const getEntered = Promise.withResolvers<void>();
  const wrapKit = (kit: Kit): Kit =>
    Object.assign(Object.create(kit), {
      get: async (id: string) => {
        getEntered.resolve();
        await getGate.promise;
        return await kit.get(id);
      },
    });
  const starting = startTestApp([`--metrics-addr=127.0.0.1:${metricsPort}`], { backend, wrapKit });

  // Booting: the inventory waits on the backend.
  const health = await waitFor("/healthz during boot", async () => {
    try {
      return await httpGet(metricsPort, "/healthz");
    } catch {
      return undefined;
    }
  });
  assert.deepEqual([health.status, health.body], [200, "ok"]);
  const bootReady = await httpGet(metricsPort, "/readyz");
  assert.deepEqual([bootReady.status, bootReady.body], [503, "not ready"]);
  assert.match(bootReady.contentType, /^text\/plain/);

  release();
  const app = await starting;
  assert.equal(app.metricsPort, metricsPort);
  const ready = await httpGet(metricsPort, "/readyz");
  assert.deepEqual([ready.status, ready.body], [200, "ready"]);
  assert.equal((await httpGet(metricsPort, "/nope")).status, 404);
  assert.equal((await httpGet(metricsPort, "/metrics/extra")).status, 404);

  const client = new RawClient(
    `127.0.0.1:${app.grpcPort}`,
    withGoawayFilter(grpc.credentials.createInsecure()),
  );
  const listed = await client.call("List", {});
  assert.ok(listed.ok);
  const id = (listed.value.machines as { id: string }[])[0].id;
  const pendingGet = client.call("Get", { id }, 10_000);
  let getDone = false;
  pendingGet.then(() => getDone = true);
  await getEntered.promise; // the Get is inside the kit

  const stopping = app.stop();
  // From the first moment of shutdown: not ready, still alive, call still open.
  const during = await httpGet(metricsPort, "/readyz");
  assert.deepEqual([during.status, during.body], [503, "not ready"]);
  assert.equal((await httpGet(metricsPort, "/healthz")).status, 200);
  // stop() asked the server to stop accepting before the probes above
  // answered; the Get is held in the kit, so it can only have ended by being cut.
  assert.equal(getDone, false, "the in-flight Get has not been cut");

  getGate.resolve();
  const got = await pendingGet;
  assert.ok(got.ok, `in-flight Get completed: ${JSON.stringify(got)}`);
  await stopping;
  client.close();
  await assert.rejects(httpGet(metricsPort, "/healthz"), "listener closed after stop");
});

Deno.test("probes: a busy metrics port is logged and the provider serves anyway", async () => {
  const metricsPort = freePort();
  const squatter = Deno.listen({ hostname: "127.0.0.1", port: metricsPort });
  const proc = await startProvider({
    args: ["--use-fake-backend", "--seed-count=4", `--metrics-addr=127.0.0.1:${metricsPort}`],
  });
  const h = new Harness(proc.addr);
  try {
    const listed = await h.list();
    assert.equal(listed.machines.length, 4);
    await waitForServing(proc);
    const lines = logLines(proc.stderr());
    const warn = lines.find((l) => String(l.message).startsWith("metrics listener disabled"));
    assert.ok(warn, "busy port logged");
    assert.equal(warn.level, "WARN");
    assert.match(String(warn.message), /already in use/);
    assert.equal(proc.exitStatus(), undefined, "still running");
  } finally {
    h.close();
    squatter.close();
    await proc.stop();
  }
});

Deno.test("probes: two providers on one metrics port both serve gRPC", async () => {
  const metricsPort = freePort();
  const args = ["--seed-count=4", `--metrics-addr=127.0.0.1:${metricsPort}`];
  const a = await startProvider({ args: ["--use-fake-backend", ...args] });
  const b = await startProvider({ args: ["--use-fake-backend", ...args] });
  try {
    for (const p of [a, b]) {
      const h = new Harness(p.addr);
      assert.equal((await h.list()).machines.length, 4);
      h.close();
    }
    assert.equal((await httpGet(metricsPort, "/healthz")).body, "ok");
  } finally {
    await a.stop();
    await b.stop();
  }
});

Deno.test("probes: an empty --metrics-addr disables the listener", async () => {
  const app = await startTestApp(["--metrics-addr="]);
  try {
    assert.equal(app.metricsPort, null);
  } finally {
    await app.stop();
  }
});
