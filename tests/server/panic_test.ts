// A handler exception becomes INTERNAL, counts in panics_total, logs at
// ERROR, and the server keeps serving; process-wide guards keep a stray
// exception or rejection from ending the process.

import assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { withGoawayFilter } from "../../src/client/goaway_credentials.ts";
import { configureSync, resetSync } from "@logtape/logtape";
import type { LogRecord } from "@logtape/logtape";
import type { Kit } from "../../src/kit/api.ts";
import { REPO_ROOT } from "../harness/process.ts";
import { logLines, parseMetrics, RawClient, sample, startTestApp } from "./helpers.ts";

Deno.test("panic: a throwing handler answers INTERNAL, is counted and logged, serving goes on", async () => {
  const records: LogRecord[] = [];
  configureSync({
    reset: true,
    sinks: { capture: (r) => records.push(r) },
    loggers: [
      { category: ["bigfleet"], lowestLevel: "debug", sinks: ["capture"] },
      { category: ["logtape", "meta"], lowestLevel: "warning", sinks: ["capture"] },
    ],
  });
  const wrapKit = (kit: Kit): Kit =>
    Object.assign(Object.create(kit), {
      get: (id: string) => {
        if (id === "boom-sync") throw new TypeError("kit exploded synchronously");
        if (id === "boom-async") return Promise.reject("a bare string, not an Error");
        return kit.get(id);
      },
    });
  const app = await startTestApp(["--metrics-addr="], { wrapKit });
  const client = new RawClient(
    `127.0.0.1:${app.grpcPort}`,
    withGoawayFilter(grpc.credentials.createInsecure()),
  );
  try {
    for (const id of ["boom-sync", "boom-async"]) {
      const r = await client.call("Get", { id });
      assert.equal(r.ok, false);
      assert.equal(!r.ok && r.code, grpc.status.INTERNAL);
      assert.equal(!r.ok && r.details, "internal error in Get", "no internals leak to the client");
    }
    const listed = await client.call("List", {});
    assert.ok(listed.ok, "still serving");
    const s = parseMetrics((await app.metrics.scrape()).body);
    assert.equal(sample(s, "bigfleet_proxmox_panics_total"), 2);
    assert.equal(
      sample(s, "bigfleet_proxmox_grpc_requests_total", { method: "Get", code: "INTERNAL" }),
      2,
    );
    const errors = records.filter((r) => r.level === "error");
    assert.equal(errors.length, 2);
    assert.equal(errors[0].properties.method, "Get");
    assert.match(String(errors[0].properties.error), /kit exploded synchronously/);
  } finally {
    client.close();
    await app.stop();
    resetSync();
  }
});

Deno.test("panic: the uncaught-error handlers count a stray exception and rejection; the process lives", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-env",
      "--allow-read",
      "--allow-sys",
      "tests/server/fixtures/uncaught.ts",
    ],
    cwd: REPO_ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stdout = new TextDecoder().decode(out.stdout);
  const stderr = new TextDecoder().decode(out.stderr);
  assert.equal(out.code, 0, stderr);
  assert.match(stdout, /^alive bigfleet_proxmox_panics_total 2$/m);
  const errors = logLines(stderr).filter((l) =>
    l.level === "ERROR" && l.logger === "bigfleet.panic"
  );
  assert.equal(errors.length, 2);
  assert.ok(errors.some((l) => String(l.error).startsWith("Error: boom from a timer")));
  assert.ok(errors.some((l) => String(l.error).startsWith("Error: boom from a promise")));
});
