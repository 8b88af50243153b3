// Self-tests of the transport layer: TLS, auth, body handling, error shapes,
// cluster endpoints and tasks.

import assert from "node:assert/strict";
import { parseUpid } from "./tasks.ts";
import { rawRequest, withSim } from "./testkit.ts";

Deno.test("TLS: CA verifies, fingerprint matches the leaf, wrong CA is refused", async () => {
  await withSim(async (sim) => {
    assert.match(sim.url, /^https:\/\/127\.0\.0\.1:\d+\/api2\/json$/);
    assert.match(sim.fingerprint, /^([0-9A-F]{2}:){31}[0-9A-F]{2}$/);
    assert.equal(await Deno.readTextFile(sim.caFile), sim.caPem);
    const wrong = Deno.createHttpClient({ caCerts: [sim.wrongCaPem] });
    try {
      await assert.rejects(fetch(sim.url + "/version", { client: wrong }));
    } finally {
      wrong.close();
    }
    // node:tls shows the same fingerprint a pinning client would check.
    const tls = await import("node:tls");
    const fp = await new Promise<string>((resolve, reject) => {
      const s = tls.connect(
        { host: sim.host, port: sim.port, rejectUnauthorized: false },
        () => {
          resolve(s.getPeerCertificate().fingerprint256);
          s.end();
        },
      );
      s.on("error", reject);
    });
    assert.equal(fp, sim.fingerprint);
  });
});

Deno.test("auth: No ticket, Authentication failed!, space form, last '=' split", async () => {
  await withSim(async (sim, api) => {
    const none = await rawRequest(sim, "GET", "/cluster/status", {
      headers: { Authorization: "" },
    });
    assert.equal(none.status, 401);
    assert.equal(none.reason, "No ticket");
    assert.equal(none.body, "");
    const bad = await rawRequest(sim, "GET", "/cluster/status", {
      headers: { Authorization: `PVEAPIToken=${sim.tokenId}=nope` },
    });
    assert.equal(bad.status, 401);
    assert.equal(bad.reason, "Authentication failed!");
    assert.equal(bad.body, "");
    const space = await api.call("GET", "/cluster/status", {
      auth: `PVEAPIToken ${sim.tokenId}=${sim.tokenSecret}`,
    });
    assert.equal(space.status, 200);
    // 401 beats 501: unknown paths still need auth first.
    assert.equal((await api.call("GET", "/nope", { auth: false })).status, 401);
    const log = sim.requests.filter((r) => r.path === "/cluster/status");
    assert.deepEqual(log.map((r) => [r.authenticated, r.status]), [[false, 401], [false, 401], [
      true,
      200,
    ]]);
  });
});

Deno.test("auth: failure delay and the unauthorized / forbidden switches", async () => {
  await withSim(async (sim, api) => {
    const t0 = Date.now();
    assert.equal(
      (await api.call("GET", "/version", { auth: "PVEAPIToken=x@pve!y=z" })).status,
      401,
    );
    assert.ok(Date.now() - t0 >= 140);
    sim.faults.unauthorized = true;
    assert.equal((await api.call("GET", "/version")).status, 401);
    sim.faults.unauthorized = false;
    sim.faults.forbidden = /\/qemu\/9000\/config/;
    const f = await rawRequest(sim, "GET", "/nodes/pve1/qemu/9000/config");
    assert.equal(f.status, 403);
    assert.equal(f.reason, "Permission check failed (/vms/9000, VM.Audit)");
    assert.equal((await api.call("GET", "/nodes/pve1/qemu/9000/status/current")).status, 200);
  }, { authFailDelayMs: 150 });
});

Deno.test("errors: reason phrase + message, legacy mode without message, never 404", async () => {
  await withSim(async (sim, api) => {
    const r = await rawRequest(sim, "GET", "/nodes/pve1/qemu/12345/status/current");
    assert.equal(r.status, 500);
    assert.equal(r.reason, "Configuration file 'nodes/pve1/qemu-server/12345.conf' does not exist");
    assert.deepEqual(JSON.parse(r.body), {
      data: null,
      message: "Configuration file 'nodes/pve1/qemu-server/12345.conf' does not exist\n",
    });
    assert.equal(r.headers["server"], "pve-api-daemon/3.0");
    // A VM on another node than the URL is just as absent.
    const other = await api.call("GET", "/nodes/pve2/qemu/9000/config");
    assert.equal(other.status, 500);
    assert.equal(
      other.body.message,
      "Configuration file 'nodes/pve2/qemu-server/9000.conf' does not exist\n",
    );
    const unknown = await rawRequest(sim, "GET", "/nodes/pve1/foo");
    assert.equal(unknown.status, 501);
    assert.equal(unknown.reason, "Method 'GET /nodes/pve1/foo' not implemented");
    const badNode = await api.call("GET", "/nodes/pve9/status");
    assert.equal(badNode.status, 500);
    assert.match(badNode.body.message, /^hostname lookup 'pve9' failed/);
  });
  await withSim(async (sim) => {
    const r = await rawRequest(sim, "GET", "/nodes/pve1/qemu/12345/config");
    assert.equal(r.status, 500);
    assert.equal(r.reason, "Configuration file 'nodes/pve1/qemu-server/12345.conf' does not exist");
    assert.deepEqual(JSON.parse(r.body), { data: null });
    const p = await rawRequest(sim, "GET", "/cluster/nextid?vmid=9000");
    assert.equal(p.reason, "Parameter verification failed.");
    assert.deepEqual(JSON.parse(p.body), {
      data: null,
      errors: { vmid: "VM 9000 already exists" },
    });
  }, { legacyErrors: true });
});

Deno.test("bodies: 506 content type, 501 body on GET/DELETE, form + JSON, unknown params", async () => {
  await withSim(async (sim, api) => {
    const txt = await api.call("PUT", "/nodes/pve1/qemu/9000/config", {
      raw: { body: "cores=2", contentType: "text/plain;charset=UTF-8" },
    });
    assert.equal(txt.status, 506);
    const get = await rawRequest(sim, "DELETE", "/nodes/pve1/qemu/9000", {
      body: "purge=1",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
    });
    assert.equal(get.status, 501, get.body);
    assert.equal(get.reason, "Unexpected content for method 'DELETE'");
    const unknown = await api.call("GET", "/cluster/resources?type=vm&bogus=1");
    assert.equal(unknown.status, 400);
    assert.deepEqual(unknown.body.errors, {
      bogus:
        "property is not defined in schema and the schema does not allow additional properties",
    });
    assert.equal(unknown.body.message, "Parameter verification failed.\n");
    const enumBad = await api.call("GET", "/cluster/resources?type=qemu");
    assert.equal(enumBad.status, 400);
    assert.ok(enumBad.body.errors.type);
    // A charset parameter on the media type is fine.
    const ok = await api.call("PUT", "/nodes/pve1/qemu/9000/config", {
      raw: { body: '{"description":"x"}', contentType: "application/json;charset=UTF-8" },
    });
    assert.equal(ok.status, 200);
    assert.deepEqual(ok.body, { data: null });
    assert.equal(sim.vm(9000)?.description, "x");
  });
});

Deno.test("bodies: booleans, path conflicts, missing and invalid parameters", async () => {
  await withSim(async (_sim, api) => {
    const formTrue = await api.call("POST", "/nodes/pve1/qemu/9000/clone", {
      form: "newid=120&full=true",
    });
    assert.equal(formTrue.status, 400);
    assert.equal(formTrue.body.errors.full, "type check ('boolean') failed - got 'true'");
    const jsonTrue = await api.call("POST", "/nodes/pve1/qemu/9000/clone", {
      json: { newid: 120, full: true },
    });
    assert.equal(jsonTrue.status, 200);
    const conflict = await api.call("PUT", "/nodes/pve1/qemu/9000/config", {
      json: { vmid: 9001, cores: 2 },
    });
    assert.equal(conflict.status, 400);
    assert.match(conflict.body.errors.vmid, /duplicate parameter/);
    const missing = await api.call("POST", "/nodes/pve1/qemu/9000/clone", { json: {} });
    assert.equal(missing.status, 400);
    assert.equal(missing.body.errors.newid, "property is missing and it is not optional");
    const badName = await api.call("POST", "/nodes/pve1/qemu/9000/clone", {
      json: { newid: 121, name: "bad_name" },
    });
    assert.equal(
      badName.body.errors.name,
      "invalid format - value does not look like a valid DNS name\n",
    );
    const badInt = await api.call("PUT", "/nodes/pve1/qemu/9000/config", {
      form: "cores=two",
    });
    assert.equal(badInt.body.errors.cores, "type check ('integer') failed - got 'two'");
  });
});

Deno.test("cluster: status, resources with lxc, nextid as string", async () => {
  await withSim(async (sim, api) => {
    const status = await api.data("GET", "/cluster/status") as Record<string, unknown>[];
    assert.deepEqual(status[0], {
      type: "cluster",
      id: "cluster",
      name: "pvesim",
      version: 7,
      quorate: 1,
      nodes: 2,
    });
    assert.deepEqual(status.slice(1).map((n) => [n.id, n.online, n.local]), [
      ["node/pve1", 1, 1],
      ["node/pve2", 1, 0],
    ]);
    const res = await api.data("GET", "/cluster/resources?type=vm") as Record<string, unknown>[];
    assert.deepEqual(res.map((r) => [r.id, r.type, r.node]), [
      ["qemu/9000", "qemu", "pve1"],
      ["lxc/150", "lxc", "pve2"],
    ]);
    const tmpl = res[0];
    assert.equal(tmpl.template, 1);
    assert.equal(tmpl.name, "tmpl-k8s");
    assert.equal(tmpl.tags, "k8s;template");
    assert.equal(await api.data("GET", "/cluster/nextid"), "100");
    assert.equal(await api.data("GET", "/cluster/nextid?vmid=4242"), "4242");
    const taken = await api.call("GET", "/cluster/nextid?vmid=150");
    assert.equal(taken.status, 400);
    assert.deepEqual(taken.body.errors, { vmid: "VM 150 already exists" });
    const node = await api.data("GET", "/nodes/pve1/status") as Record<string, unknown>;
    assert.ok(Array.isArray(node.loadavg) && typeof node.loadavg[0] === "string");
    sim.faults.auditHidden = true;
    assert.deepEqual(await api.data("GET", "/cluster/resources?type=vm"), []);
    // Direct reads still work without VM.Audit on the list.
    assert.equal((await api.call("GET", "/nodes/pve1/qemu/9000/config")).status, 200);
  });
});

Deno.test("tasks: UPID format, running then stopped, tokenid split, wrong node", async () => {
  await withSim(async (sim, api) => {
    const upid = await api.data("POST", "/nodes/pve1/qemu/9000/clone", {
      json: { newid: 100, name: "a", full: 1 },
    }) as string;
    assert.match(
      upid,
      /^UPID:pve1:[0-9A-F]{8}:[0-9A-F]{8}:[0-9A-F]{8}:qmclone:9000:bigfleet@pve!autoscaler:$/,
    );
    const parsed = parseUpid(upid)!;
    const running = await api.data("GET", `/nodes/pve1/tasks/${encodeURIComponent(upid)}/status`);
    assert.deepEqual(running, {
      upid,
      node: "pve1",
      pid: parsed.pid,
      pstart: parsed.pstart,
      starttime: parsed.starttime,
      type: "qmclone",
      id: "9000",
      user: "bigfleet@pve",
      tokenid: "autoscaler",
      status: "running",
    });
    const done = await api.waitTask(upid);
    assert.equal(done.exitstatus, "OK");
    assert.equal("endtime" in done, false);
    const wrongNode = await api.call("GET", `/nodes/pve2/tasks/${upid}/status`);
    assert.equal(wrongNode.status, 400);
    assert.deepEqual(wrongNode.body.errors, { upid: "no such task" });
    const garbage = await api.call("GET", `/nodes/pve1/tasks/UPID:nope/status`);
    assert.deepEqual(garbage.body.errors, { upid: "unable to parse worker upid" });
    const log = await api.data("GET", `/nodes/pve1/tasks/${upid}/log`) as { t: string }[];
    assert.equal(log.at(-1)?.t, "TASK OK");
    assert.equal(sim.tasks().length, 1);
  });
});

Deno.test("596: answer lost, operation still happens; plain-text body", async () => {
  await withSim(async (sim, api) => {
    sim.faults.http596.push({ path: "/qemu/9000/config", method: "PUT", count: 1 });
    const r = await rawRequest(sim, "PUT", "/nodes/pve1/qemu/9000/config", {
      body: JSON.stringify({ description: "changed" }),
      headers: { "Content-Type": "application/json" },
    });
    assert.equal(r.status, 596);
    assert.equal(r.reason, "Connection timed out");
    assert.equal(r.body, "Connection timed out\n");
    assert.equal(sim.vm(9000)?.description, "changed");
    assert.equal(sim.faults.http596.length, 0);
    // The rule was used up: the next request goes through.
    assert.equal((await api.call("GET", "/nodes/pve1/qemu/9000/config")).status, 200);
    sim.faults.http596.push({ path: /nextid/, count: 1, performed: false, status: 595 });
    const n = await api.call("GET", "/cluster/nextid");
    assert.equal(n.status, 595);
    assert.equal(n.body, null);
  });
});
