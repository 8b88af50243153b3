// Self-tests of the access endpoints: GET /access/permissions after
// pve-access-control (propagation, deeper grants replacing inherited ones,
// pool grants reaching member VMs unpropagated, token ∩ user, the version's
// privilege names), GET /pools, a storage's status on a node, and the
// request log every request lands in.

import assert from "node:assert/strict";
import { rawRequest, withSim } from "./testkit.ts";
import type { SimAcl } from "./types.ts";

type Obj = Record<string, unknown>;

const perms = async (api: { data(m: string, p: string): Promise<unknown> }, path: string) =>
  (await api.data("GET", `/access/permissions?path=${encodeURIComponent(path)}`) as Obj)[path];

Deno.test("access/permissions: no ACL model grants the version's every privilege, propagated", async () => {
  for (
    const [version, has, lacks] of [["8.4.1", "VM.Monitor", "VM.GuestAgent.Audit"], [
      "9.0.3",
      "VM.GuestAgent.Unrestricted",
      "VM.Monitor",
    ]]
  ) {
    await withSim(async (_sim, api) => {
      const p = await perms(api, "/vms/9000") as Obj;
      assert.equal(p[has], 1, version);
      assert.equal(p[lacks], undefined, version);
      assert.equal(p["VM.Clone"], 1);
      // Without a path: the top-level paths, each with everything.
      const tree = await api.data("GET", "/access/permissions") as Obj;
      for (const top of ["/", "/vms", "/storage", "/pool", "/sdn"]) {
        assert.equal((tree[top] as Obj)["VM.Audit"], 1, top);
      }
    }, { pveVersion: version });
  }
});

Deno.test("access/permissions: propagation, deeper grants, pools, token ∩ user", async () => {
  const acl: SimAcl = {
    entries: [
      // The user: broad rights, propagated from the root.
      {
        path: "/",
        privs: [
          "VM.Audit",
          "VM.Clone",
          "VM.Allocate",
          "Datastore.Audit",
          "Pool.Audit",
          "VM.PowerMgmt",
        ],
        propagate: true,
        ugid: "user",
      },
      // The token: the pool, one template (not propagated), /vms audit propagated.
      {
        path: "/pool/bigfleet",
        privs: ["VM.Allocate", "VM.PowerMgmt", "Pool.Audit"],
        propagate: false,
      },
      { path: "/vms/9000", privs: ["VM.Clone", "VM.Audit"], propagate: false },
      { path: "/vms", privs: ["VM.Audit"], propagate: true },
      { path: "/storage/ceph-vm", privs: ["Datastore.Audit", "Datastore.AllocateSpace"] },
    ],
  };
  await withSim(async (sim, api) => {
    // Exactly the path: the token's grant, flagged unpropagated.
    assert.deepEqual(await perms(api, "/vms/9000"), { "VM.Audit": 0, "VM.Clone": 0 });
    // A grant at /vms/9000 replaces the propagated /vms one there; below /vms it applies.
    assert.deepEqual(await perms(api, "/vms/555"), { "VM.Audit": 1 });
    assert.deepEqual(await perms(api, "/vms"), { "VM.Audit": 1 });
    // The pool path itself; the user lacks nothing of it.
    assert.deepEqual(await perms(api, "/pool/bigfleet"), {
      "Pool.Audit": 0,
      "VM.Allocate": 0,
      "VM.PowerMgmt": 0,
    });
    // Datastore.AllocateSpace: the token has it, the user does not: the token does not.
    assert.deepEqual(await perms(api, "/storage/ceph-vm"), { "Datastore.Audit": 0 });
    // A member VM of the pool gets the pool's privileges (0: pool-derived) next to its own.
    sim.addVm({ vmid: 4100, name: "m1", template: false, pool: "bigfleet" });
    assert.deepEqual(await perms(api, "/vms/4100"), {
      "Pool.Audit": 0,
      "VM.Allocate": 0,
      "VM.Audit": 1,
      "VM.PowerMgmt": 0,
    });
    // A token may not read its own user's permissions (only the reverse is
    // allowed) without Sys.Audit on /access: as the real PVE 8.4 answers.
    const user = await rawRequest(
      sim,
      "GET",
      `/access/permissions?path=/storage/ceph-vm&userid=${
        encodeURIComponent(sim.tokenId.split("!")[0])
      }`,
    );
    assert.deepEqual(
      [user.status, user.reason],
      [403, "Permission check failed (/access, Sys.Audit)"],
    );
    // Its own token id is itself.
    const self = await api.data(
      "GET",
      `/access/permissions?path=/storage/ceph-vm&userid=${encodeURIComponent(sim.tokenId)}`,
    ) as Obj;
    assert.deepEqual(self["/storage/ceph-vm"], { "Datastore.Audit": 0 });
    const tree = await api.data("GET", "/access/permissions") as Obj;
    assert.deepEqual(Object.keys(tree).sort(), [
      "/pool/bigfleet",
      "/storage/ceph-vm",
      "/vms",
      "/vms/4100",
      "/vms/9000",
    ]);
    // A path nobody granted anything on: an empty map, not an error.
    assert.deepEqual(await perms(api, "/sdn/zones/localnetwork/vmbr0"), {});
    // Another user's permissions need Sys.Audit on /access.
    const other = await rawRequest(sim, "GET", "/access/permissions?userid=root%40pam");
    assert.equal(other.status, 403);
    assert.equal(other.reason, "Permission check failed (/access, Sys.Audit)");
  }, { acl });
});

Deno.test("pools: listed when audited; one pool by id with its members, or why not", async () => {
  await withSim(async (sim, api) => {
    sim.addVm({ vmid: 4100, name: "m1", template: false, pool: "bigfleet" });
    assert.deepEqual(await api.data("GET", "/pools"), [{ poolid: "bigfleet" }, {
      poolid: "other",
    }]);
    const one = await api.data("GET", "/pools?poolid=bigfleet") as Obj[];
    assert.equal(one.length, 1);
    assert.deepEqual((one[0].members as Obj[]).map((m) => m.vmid), [4100]);
    const missing = await rawRequest(sim, "GET", "/pools?poolid=nope");
    assert.equal(missing.status, 500);
    assert.equal(missing.reason, "pool 'nope' does not exist");
    // Without Pool.Audit a pool is left out of the list, and refused by id.
    sim.faults.acl = { entries: [{ path: "/pool/other", privs: ["Pool.Audit"] }] };
    assert.deepEqual(await api.data("GET", "/pools"), [{ poolid: "other" }]);
    assert.equal((await rawRequest(sim, "GET", "/pools?poolid=bigfleet")).status, 403);
  }, { pools: ["bigfleet", "other"] });
});

Deno.test("storage status: size and free space per node; unknown, unavailable, hidden, offline", async () => {
  const GIB = 1024 ** 3;
  await withSim(async (sim, api) => {
    const s = await api.data("GET", "/nodes/pve2/storage/small/status") as Obj;
    assert.deepEqual(
      [s.total, s.used, s.avail, s.active, s.shared, s.type],
      [100 * GIB, 30 * GIB, 70 * GIB, 1, 0, "lvmthin"],
    );
    const res = await api.data("GET", "/cluster/resources?type=storage") as Obj[];
    const entry = res.find((e) => e.storage === "small" && e.node === "pve2")!;
    assert.deepEqual([entry.maxdisk, entry.disk], [100 * GIB, 30 * GIB]);
    const reason = async (path: string) => (await rawRequest(sim, "GET", path)).reason;
    assert.equal(await reason("/nodes/pve2/storage/nope/status"), "storage 'nope' does not exist");
    assert.equal(
      await reason("/nodes/pve1/storage/small/status"),
      "storage 'small' is not available on node 'pve1'",
    );
    sim.faults.hiddenStorages = ["small"];
    assert.equal((await rawRequest(sim, "GET", "/nodes/pve2/storage/small/status")).status, 403);
    sim.faults.hiddenStorages = [];
    sim.faults.offlineStorages = ["small"];
    const off = await api.data("GET", "/nodes/pve2/storage/small/status") as Obj;
    assert.deepEqual([off.active, off.avail], [0, undefined]);
  }, {
    storages: [{
      id: "small",
      type: "lvmthin",
      nodes: ["pve2"],
      totalBytes: 100 * GIB,
      usedBytes: 30 * GIB,
    }],
  });
});

Deno.test("request log: every request, authenticated or not, with method, path and status", async () => {
  await withSim(async (sim, api) => {
    await api.call("GET", "/version", { auth: false });
    await api.data("GET", "/access/permissions?path=/vms");
    await api.call("POST", "/nodes/pve1/qemu/9000/status/start");
    assert.deepEqual(
      sim.requests.map((r) => [r.method, r.path, r.authenticated, r.status]),
      [
        ["GET", "/version", false, 401],
        ["GET", "/access/permissions", true, 200],
        ["POST", "/nodes/pve1/qemu/9000/status/start", true, sim.requests[2].status],
      ],
    );
    assert.equal(sim.requests[1].query, "path=/vms");
  });
});
