// Self-tests of task ownership per token (task_access.ts; pve-manager
// API2/Tasks.pm, 8.x and 9.x alike, seen on the real PVE 8.4 and 9.2.11
// during a token rotation), and of where a clone task runs: on the
// template's node, whatever `target` says.

import assert from "node:assert/strict";
import { Api, rawRequest, withSim } from "./testkit.ts";
import type { SimAcl, Simulator } from "./types.ts";

type Obj = Record<string, unknown>;
const USER = "bigfleet@pve";
const OTHER = `${USER}!rotated`;
const FAST = { cloneMs: 400, cloneNamelessMs: 100, taskMs: 10 };

/** What the provider's tokens hold (setup-token.sh): nothing on /nodes. */
const NO_NODE_AUDIT: SimAcl = {
  entries: [
    {
      path: "/vms",
      privs: ["VM.Allocate", "VM.Audit", "VM.Clone", "VM.PowerMgmt"],
      propagate: true,
    },
    { path: "/pool/bigfleet", privs: ["VM.Allocate", "Pool.Audit"], propagate: true },
    { path: "/storage", privs: ["Datastore.AllocateSpace"], propagate: true },
    { path: "/sdn/zones/localnetwork", privs: ["SDN.Use"], propagate: true },
  ],
};

function asOther(sim: Simulator, method: string, path: string) {
  return rawRequest(sim, method, path, { headers: { Authorization: `PVEAPIToken=${OTHER}=s2` } });
}

async function startClone(api: Api, newid: number, body: Obj = {}): Promise<string> {
  return await api.data("POST", "/nodes/pve1/qemu/9000/clone", {
    json: { newid, full: 1, ...body },
  }) as string;
}

const upids = (r: { body: string }) =>
  (JSON.parse(r.body).data as Obj[]).map((t) => String(t.upid));

Deno.test("tasks per token: another token gets 403 Permission check failed (/nodes/pve1, Sys.Audit) and does not list them", async () => {
  await withSim(async (sim, api) => {
    sim.addToken(OTHER, "s2");
    const upid = await startClone(api, 100);
    for (const what of ["status", "log"]) {
      const r = await asOther(sim, "GET", `/nodes/pve1/tasks/${upid}/${what}`);
      assert.deepEqual(
        [r.status, r.reason],
        [403, "Permission check failed (/nodes/pve1, Sys.Audit)"],
        what,
      );
    }
    for (const q of ["?source=active", "", "?source=all"]) {
      const r = await asOther(sim, "GET", `/nodes/pve1/tasks${q}`);
      assert.equal(r.status, 200);
      assert.deepEqual(upids(r), [], q);
    }
    // Its owner sees it, running and finished.
    const own = await api.data("GET", "/nodes/pve1/tasks?source=active") as Obj[];
    assert.deepEqual(own.map((t) => [t.upid, t.user]), [[upid, sim.tokenId]]);
    assert.equal((await api.waitTask(upid)).exitstatus, "OK");
    // The other token's own tasks are its own.
    const mine = JSON.parse(
      (await rawRequest(sim, "POST", "/nodes/pve1/qemu/9000/clone", {
        body: JSON.stringify({ newid: 101, full: 1 }),
        headers: { Authorization: `PVEAPIToken=${OTHER}=s2`, "Content-Type": "application/json" },
      })).body,
    ).data as string;
    assert.match(mine, /:qmclone:9000:bigfleet@pve!rotated:$/);
    assert.equal((await asOther(sim, "GET", `/nodes/pve1/tasks/${mine}/status`)).status, 200);
    assert.deepEqual(upids(await asOther(sim, "GET", "/nodes/pve1/tasks?source=all")), [mine]);
    const forFirst = await api.call("GET", `/nodes/pve1/tasks/${mine}/status`);
    assert.equal(forFirst.status, 403);
  }, { acl: NO_NODE_AUDIT, timing: FAST });
});

Deno.test("tasks per token: Sys.Audit on /nodes/<node> shows every token's tasks on that node", async () => {
  const acl: SimAcl = {
    entries: [...NO_NODE_AUDIT.entries, { path: "/nodes/pve1", privs: ["Sys.Audit"] }],
  };
  await withSim(async (sim, api) => {
    sim.addToken(OTHER, "s2");
    const upid = await startClone(api, 100);
    const st = await asOther(sim, "GET", `/nodes/pve1/tasks/${upid}/status`);
    assert.equal(st.status, 200);
    assert.equal(JSON.parse(st.body).data.tokenid, "autoscaler");
    assert.equal((await asOther(sim, "GET", `/nodes/pve1/tasks/${upid}/log`)).status, 200);
    assert.deepEqual(upids(await asOther(sim, "GET", "/nodes/pve1/tasks?source=active")), [upid]);
    await api.waitTask(upid);
  }, { acl, timing: FAST });
});

Deno.test("clone with target=pve2 runs on the template's node: its UPID names pve1, pve1's task list shows it", async () => {
  await withSim(async (sim, api) => {
    const upid = await startClone(api, 100, { target: "pve2" });
    assert.match(upid, /^UPID:pve1:/);
    const onSource = await api.data("GET", "/nodes/pve1/tasks?source=active") as Obj[];
    assert.deepEqual(onSource.map((t) => t.upid), [upid]);
    const onTarget = await api.data("GET", "/nodes/pve2/tasks?source=all") as Obj[];
    assert.deepEqual(onTarget, []);
    const wrong = await api.call("GET", `/nodes/pve2/tasks/${upid}/status`);
    assert.deepEqual(wrong.body.errors, { upid: "no such task" });
    assert.equal((await api.waitTask(upid)).exitstatus, "OK");
    assert.equal(sim.vm(100)!.node, "pve2", "the VM itself lands on the target");
  }, { timing: FAST });
});
