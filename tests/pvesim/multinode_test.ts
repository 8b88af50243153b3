// Self-tests of several nodes (multinode.ts, statuscache.ts), each as a real
// 3-node PVE 8.4 cluster showed it (issue 25): a node cut off, quorum,
// /cluster/resources' stale and bare entries, rejoining, clones across
// nodes, the agent right after a start and the pveproxy workers' status
// caches.

import assert from "node:assert/strict";
import { rawRequest, until, withSim } from "./testkit.ts";
import { sleep } from "../harness/time.ts";
import type { SimOptions, SimTemplate } from "./types.ts";

type Obj = Record<string, unknown>;
const NODES = ["pve1", "pve2", "pve3"];
const TEMPLATES: SimTemplate[] = [
  { vmid: 9000, node: "pve1", name: "tmpl-shared" },
  { vmid: 9002, node: "pve2", name: "tmpl-local", sharedStorage: false },
  { vmid: 9003, node: "pve3", name: "tmpl-pve3" },
  { vmid: 9100, node: "pve3", name: "web-1", template: false, running: true },
];
const OPTS: SimOptions = {
  nodes: NODES,
  templates: TEMPLATES,
  lxc: [],
  timing: { cloneMs: 30, cloneNamelessMs: 10, taskMs: 10, resourcesLagMs: 0 },
};

const json = (body: unknown) => ({
  body: JSON.stringify(body),
  headers: { "Content-Type": "application/json" },
});

async function timed<T>(fn: () => Promise<T>): Promise<[T, number]> {
  const t0 = Date.now();
  const v = await fn();
  return [v, Date.now() - t0];
}

Deno.test("node cut: link → 595 Connection timed out after the proxy timeout, then 595 No route to host; daemons → 595 Connection refused", async () => {
  await withSim(async (sim) => {
    sim.cutNode("pve3");
    const [first, slow] = await timed(() => rawRequest(sim, "GET", "/nodes/pve3/status"));
    assert.deepEqual([first.status, first.reason, first.body], [595, "Connection timed out", ""]);
    assert.ok(slow >= 390, `${slow} ms`);
    const [later, fast] = await timed(() => rawRequest(sim, "GET", "/nodes/pve3/qemu/9100/config"));
    assert.deepEqual([later.status, later.reason, later.body], [595, "No route to host", ""]);
    assert.ok(fast >= 40 && fast < 390, `${fast} ms`);
    sim.rejoinNode("pve3");
    assert.equal((await rawRequest(sim, "GET", "/nodes/pve3/status")).status, 200);

    sim.cutNode("pve3", "daemons");
    const [refused, at] = await timed(() => rawRequest(sim, "GET", "/nodes/pve3/status"));
    assert.deepEqual([refused.status, refused.reason, refused.body], [
      595,
      "Connection refused",
      "",
    ]);
    assert.ok(at < 390, `${at} ms`);
    assert.throws(() => sim.cutNode("pve1"), /serves the API/);
    assert.throws(() => sim.cutNode("pve9"), /no node pve9/);
  }, { ...OPTS, timing: { ...OPTS.timing, proxyTimeoutMs: 400, noRouteMs: 40 } });
});

Deno.test('quorum: one of three cut → "quorate":1, the node "online":0 and "status":"offline" without figures; two cut → writes die `cluster not ready - no quorum?`', async () => {
  await withSim(async (sim, api) => {
    sim.cutNode("pve3", "daemons");
    const status = await api.data("GET", "/cluster/status") as Obj[];
    assert.equal(status.find((e) => e.type === "cluster")?.quorate, 1);
    assert.equal(status.find((e) => e.name === "pve3")?.online, 0);
    assert.equal(status.find((e) => e.name === "pve2")?.online, 1);
    const nodes = await api.data("GET", "/nodes") as Obj[];
    const pve3 = nodes.find((n) => n.node === "pve3")!;
    assert.equal(pve3.status, "offline");
    for (const k of ["cpu", "mem", "maxmem", "uptime"]) assert.equal(k in pve3, false, k);
    assert.ok("uptime" in nodes.find((n) => n.node === "pve2")!);
    const put = { json: { description: "x" } };
    await api.data("PUT", "/nodes/pve1/qemu/9000/config", put);

    sim.cutNode("pve2", "daemons");
    const lost = await api.data("GET", "/cluster/status") as Obj[];
    assert.equal(lost.find((e) => e.type === "cluster")?.quorate, 0);
    const r = await rawRequest(sim, "PUT", "/nodes/pve1/qemu/9000/config", json({ name: "y" }));
    assert.deepEqual([r.status, r.reason], [500, "cluster not ready - no quorum?"]);
    const clone = await rawRequest(
      sim,
      "POST",
      "/nodes/pve1/qemu/9000/clone",
      json({ newid: 100 }),
    );
    assert.deepEqual([clone.status, clone.reason], [500, "cluster not ready - no quorum?"]);
    assert.equal(sim.vm(100), undefined);
    // Reads still work.
    assert.equal((await rawRequest(sim, "GET", "/nodes/pve1/qemu/9000/config")).status, 200);

    sim.rejoinNode("pve2");
    await api.data("PUT", "/nodes/pve1/qemu/9000/config", put);
  }, OPTS);
  // Half of an even cluster: the simulator keeps quorum (a real one needs a QDevice).
  await withSim(async (sim, api) => {
    sim.cutNode("pve2", "daemons");
    const status = await api.data("GET", "/cluster/status") as Obj[];
    assert.equal(status.find((e) => e.type === "cluster")?.quorate, 1);
  });
});

Deno.test('resources: a cut node stays "running" with a frozen uptime for the stale window, then bare {"id":"qemu/9003","node":"pve3","status":"unknown","type":"qemu","vmid":9003}; rejoined it reads "unknown" a while', async () => {
  await withSim(async (sim, api) => {
    const vms = async () => await api.data("GET", "/cluster/resources?type=vm") as Obj[];
    const storages = async () =>
      (await api.data("GET", "/cluster/resources?type=storage") as Obj[])
        .filter((s) => s.node === "pve3");
    const before = (await vms()).find((e) => e.vmid === 9100)!;
    assert.equal(before.status, "running");
    sim.cutNode("pve3", "daemons");
    sim.stopVmOutOfBand(9100); // killed behind the cut
    // Long enough for a live uptime to tick.
    await sleep(1100);
    const held = await vms();
    const web = held.find((e) => e.vmid === 9100)!;
    assert.equal(web.status, "running");
    assert.equal(web.uptime, before.uptime, "frozen");
    assert.equal(web.name, "web-1");
    assert.equal(held.find((e) => e.vmid === 9003)!.template, 1);
    assert.ok((await storages()).every((s) => s.status === "available"));
    const node = (await api.data("GET", "/cluster/resources?type=node") as Obj[])
      .find((n) => n.node === "pve3")!;
    assert.equal(node.status, "offline");

    // pmxcfs drops the old status: bare entries, no name, no template flag.
    const bare = await until(async () => {
      const e = (await vms()).find((x) => x.vmid === 9003)!;
      return e.status === "unknown" ? e : null;
    }, 5000);
    assert.deepEqual(bare, {
      id: "qemu/9003",
      node: "pve3",
      status: "unknown",
      type: "qemu",
      vmid: 9003,
    });
    assert.ok((await storages()).every((s) => s.status === "unknown"));

    sim.rejoinNode("pve3");
    const rejoined = (await api.data("GET", "/nodes") as Obj[]).find((n) => n.node === "pve3")!;
    assert.deepEqual(rejoined, { id: "node/pve3", type: "node", node: "pve3", status: "unknown" });
    await until(
      async () =>
        (await api.data("GET", "/nodes") as Obj[]).find((n) => n.node === "pve3")?.status ===
          "online",
      5000,
    );
    assert.equal((await vms()).find((e) => e.vmid === 9100)!.status, "stopped");
  }, { ...OPTS, timing: { ...OPTS.timing, statusStaleMs: 1500, rejoinUnknownMs: 300 } });
});

Deno.test("clones across nodes: target=<offline node> ends TASK OK on the template's node; a VMID living there fails `close (rename) atomic file …: File exists`; wrong node and unknown node texts", async () => {
  await withSim(async (sim, api) => {
    sim.cutNode("pve3", "daemons");
    const upid = await api.data("POST", "/nodes/pve1/qemu/9000/clone", {
      json: { newid: 100, full: 1, target: "pve3" },
    }) as string;
    assert.match(upid, /^UPID:pve1:/);
    assert.equal((await api.waitTask(upid)).exitstatus, "OK");
    assert.equal(sim.vm(100)!.node, "pve3", "the config went to the offline node's directory");
    const cfg = await rawRequest(sim, "GET", "/nodes/pve3/qemu/100/config");
    assert.deepEqual([cfg.status, cfg.reason], [595, "Connection refused"]);
    const listed = (await api.data("GET", "/cluster/resources?type=vm") as Obj[])
      .find((e) => e.vmid === 100)!;
    assert.equal(listed.status, "unknown");
    assert.equal("name" in listed, false);

    // The same VMID again, from pve1: answered, then the task fails.
    const again = await api.data("POST", "/nodes/pve1/qemu/9000/clone", {
      json: { newid: 100, full: 1 },
    }) as string;
    const st = await api.waitTask(again);
    const text = "close (rename) atomic file '/etc/pve/nodes/pve1/qemu-server/100.conf' " +
      "failed: File exists";
    assert.equal(st.exitstatus, text);
    const log = await api.data("GET", `/nodes/pve1/tasks/${again}/log`) as { t: string }[];
    assert.equal(log.at(-1)?.t, `TASK ERROR: ${text}`);

    // Refused before any task: [path, body, the 500's text].
    const refusals: [string, Obj, string][] = [
      [
        "/nodes/pve2/qemu/9002/clone",
        { newid: 101, target: "pve1" },
        "can't clone VM to node 'pve1' (VM uses local storage)",
      ],
      [
        "/nodes/pve1/qemu/9002/clone",
        { newid: 101 },
        "unable to find configuration file for VM 9002 on node 'pve1'",
      ],
      [
        "/nodes/pve9/qemu/9000/clone",
        { newid: 101 },
        "hostname lookup 'pve9' failed - failed to get address info for: pve9: Temporary failure in name resolution",
      ],
    ];
    for (const [path, body, text] of refusals) {
      const r = await rawRequest(sim, "POST", path, json(body));
      assert.deepEqual([r.status, r.reason], [500, text], path);
    }
  }, OPTS);
});

Deno.test("agent right after start: 500 QEMU guest agent is not running after the guest-ping timeout", async () => {
  await withSim(async (sim, api) => {
    await api.waitTask(await api.data("POST", "/nodes/pve3/qemu/9100/status/stop") as string);
    await api.waitTask(await api.data("POST", "/nodes/pve3/qemu/9100/status/start") as string);
    const [r, ms] = await timed(() => rawRequest(sim, "POST", "/nodes/pve3/qemu/9100/agent/ping"));
    assert.deepEqual([r.status, r.reason], [500, "QEMU guest agent is not running"]);
    assert.ok(ms >= 290, `${ms} ms`);
  }, { ...OPTS, timing: { ...OPTS.timing, qgaPingTimeoutMs: 300, agentBootMs: 60_000 } });
});

Deno.test('status caches: with two pveproxy workers a fresh "template":1 shows on one /cluster/resources call and not on the next', async () => {
  await withSim(async (sim, api) => {
    const flag = async () =>
      (await api.data("GET", "/cluster/resources?type=vm") as Obj[])
        .find((e) => e.vmid === 9100)?.template;
    sim.faults.statusCacheWorkers = 2;
    assert.equal(await flag(), 0); // worker 0 takes its dump now
    sim.stopVmOutOfBand(9100);
    sim.editVmOutOfBand(9100, (c) => c.template = 1);
    assert.equal(await flag(), 1, "worker 1 takes a fresh dump");
    assert.equal(await flag(), 0, "worker 0 still has its old one");
    assert.equal(await flag(), 1);
    // Both dumps age out (a dump's life cut short, so no call's pace matters): every call agrees again.
    sim.timing.statusCacheMs = 20;
    await until(async () => (await flag()) === 1 && (await flag()) === 1, 5000);
    sim.faults.statusCacheWorkers = 0;
    sim.editVmOutOfBand(9100, (c) => delete c.template);
    assert.equal(await flag(), 0);
    // A dump lives the whole minute here, so a slow machine's pace between calls cannot age one out.
  }, { ...OPTS, timing: { ...OPTS.timing, statusCacheMs: 60_000 } });
});
