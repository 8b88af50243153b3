// Self-tests of what a restricted token meets on a real cluster (each seen on
// the real PVE 8.4 node, docs/proxmox-notes.md): VM rights that come only
// through a pool and end with the destroy, destroy's leaked volumes and the
// storage content DELETE, a destroy dying on its `lock: destroyed` stub, the
// tag policy, the next-id range, pending changes, clone's checks on the
// template's options, and the agent's boolean spellings.

import assert from "node:assert/strict";
import { cloneAndWait, rawRequest, startAndBoot, until, withSim } from "./testkit.ts";
import type { SimAcl, SimAclEntry } from "./types.ts";

type Obj = Record<string, unknown>;

const POOL_PRIVS = [
  "VM.Allocate",
  "VM.Audit",
  "VM.Config.CPU",
  "VM.Config.Memory",
  "VM.Config.Options",
  "VM.PowerMgmt",
  "VM.Monitor",
  "Pool.Audit",
];

/** The grants of setup-token.sh --no-audit-all-vms (to the token only: not privilege-separated). */
function poolOnly(extra: SimAclEntry[] = []): SimAcl {
  return {
    entries: [
      { path: "/pool/bigfleet", privs: POOL_PRIVS, propagate: true },
      { path: "/vms/9000", privs: ["VM.Clone", "VM.Audit"] },
      { path: "/storage/ceph-vm", privs: ["Datastore.AllocateSpace", "Datastore.Audit"] },
      { path: "/sdn/zones/localnetwork/vmbr0", privs: ["SDN.Use"], propagate: true },
      ...extra,
    ],
  };
}

const json = (body: unknown) => ({
  body: JSON.stringify(body),
  headers: { "Content-Type": "application/json" },
});

Deno.test("pool ACL: rights through the pool end with the destroy: 403 on the VMID, not 'does not exist'", async () => {
  await withSim(async (sim, api) => {
    const { newid, status } = await cloneAndWait(api, { pool: "bigfleet", name: "p1" });
    assert.equal(status.exitstatus, "OK");
    const cfg = await api.data("GET", `/nodes/pve1/qemu/${newid}/config`) as Obj;
    assert.equal(cfg.name, "p1");
    // The listing shows what the token may audit: its pool member, the template.
    const listed = (await api.data("GET", "/cluster/resources?type=vm") as Obj[])
      .map((e) => e.vmid);
    assert.deepEqual(listed, [newid, 9000]);
    const upid = await api.data("DELETE", `/nodes/pve1/qemu/${newid}?purge=1`) as string;
    assert.equal((await api.waitTask(upid)).exitstatus, "OK");
    for (const sub of ["config", "status/current"]) {
      const r = await rawRequest(sim, "GET", `/nodes/pve1/qemu/${newid}/${sub}`);
      assert.deepEqual(
        [r.status, r.reason],
        [403, `Permission check failed (/vms/${newid}, VM.Audit)`],
        sub,
      );
    }
    const again = await rawRequest(sim, "DELETE", `/nodes/pve1/qemu/${newid}`);
    assert.deepEqual(
      [again.status, again.reason],
      [403, `Permission check failed (/vms/${newid}, VM.Allocate)`],
    );
    // A VMID that never existed looks the same to this token.
    const never = await rawRequest(sim, "GET", "/nodes/pve1/qemu/7777/config");
    assert.equal(never.status, 403);
    // With VM.Audit on /vms (setup-token.sh's default) the same read says "does not exist".
    sim.faults.acl = poolOnly([{ path: "/vms", privs: ["VM.Audit"], propagate: true }]);
    const audited = await rawRequest(sim, "GET", `/nodes/pve1/qemu/${newid}/config`);
    assert.deepEqual(
      [audited.status, audited.reason],
      [500, `Configuration file 'nodes/pve1/qemu-server/${newid}.conf' does not exist`],
    );
  }, { acl: poolOnly() });
});

Deno.test("destroy: a volume it cannot free is only warned about; the task ends OK and the volume stays", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api, { name: "leaky" });
    const disk = String(sim.vm(newid)!.config.scsi0).split(",")[0];
    const watched = `rbd rm 'vm-${newid}-disk-0' error: rbd: error: image still has watchers`;
    sim.faults.volumeFreeFailures = [{ match: disk, message: watched, times: 3 }];
    const upid = await api.data(
      "DELETE",
      `/nodes/pve1/qemu/${newid}?purge=1&destroy-unreferenced-disks=1`,
    ) as string;
    const st = await api.waitTask(upid);
    assert.equal(st.exitstatus, "OK", "a plain warn is not counted as a warning");
    assert.equal(sim.vm(newid), undefined, "the VM is gone");
    const log = (await api.data("GET", `/nodes/pve1/tasks/${upid}/log`) as Obj[]).map((l) => l.t);
    assert.deepEqual(log, [
      `Could not remove disk '${disk}', check manually: ${watched}`,
      // destroy-unreferenced-disks finds it again and fails on it again.
      watched,
      `purging VM ${newid} from related configurations..`,
      "TASK OK",
    ]);
    assert.deepEqual(sim.leftoverVolumes(), [{
      volid: disk,
      node: "pve1",
      storage: "ceph-vm",
      vmid: newid,
    }]);
    // Freeing it by hand: an imgdel task, failing while the watcher holds.
    const path = `/nodes/pve1/storage/ceph-vm/content/${encodeURIComponent(disk)}`;
    const first = await api.data("DELETE", path) as string;
    assert.match(first, new RegExp(`:imgdel:${newid}@ceph-vm:`));
    assert.equal((await api.waitTask(first)).exitstatus, watched);
    const second = await api.data("DELETE", path) as string;
    assert.equal((await api.waitTask(second)).exitstatus, "OK");
    const done = (await api.data("GET", `/nodes/pve1/tasks/${second}/log`) as Obj[]).map((l) =>
      l.t
    );
    assert.deepEqual(done, [`Removed volume '${disk}'`, "TASK OK"]);
    assert.deepEqual(sim.leftoverVolumes(), []);
  });
});

Deno.test("storage content DELETE needs Datastore.Allocate, which AllocateSpace does not give", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api, { pool: "bigfleet" });
    const disk = String(sim.vm(newid)!.config.scsi0).split(",")[0];
    sim.faults.volumeFreeFailures = [{ match: disk, message: "device busy" }];
    await api.waitTask(await api.data("DELETE", `/nodes/pve1/qemu/${newid}`) as string);
    const r = await rawRequest(
      sim,
      "DELETE",
      `/nodes/pve1/storage/ceph-vm/content/${encodeURIComponent(disk)}`,
    );
    assert.deepEqual(
      [r.status, r.reason],
      [403, "Permission check failed (/storage/ceph-vm, Datastore.Allocate)"],
    );
    assert.equal(sim.leftoverVolumes().length, 1);
  }, { acl: poolOnly() });
});

Deno.test("storage content GET of one volume: its attributes while it is there, the plugin's words once it is gone; Datastore.Allocate, or Audit and VM.Config.Disk on its VM", async () => {
  for (const [acl, ok] of [[undefined, true], [poolOnly(), false]] as const) {
    await withSim(async (sim, api) => {
      const { newid } = await cloneAndWait(api, { pool: "bigfleet" });
      const disk = String(sim.vm(newid)!.config.scsi0).split(",")[0];
      const path = `/nodes/pve1/storage/ceph-vm/content/${encodeURIComponent(disk)}`;
      const there = await rawRequest(sim, "GET", path);
      if (!ok) {
        // Datastore.Audit on the storage, but no VM.Config.Disk on the VM (setup-token.sh's grants).
        assert.deepEqual(
          [there.status, there.reason],
          [403, `Permission check failed (/vms/${newid}, VM.Config.Disk)`],
        );
        return;
      }
      assert.equal(there.status, 200);
      assert.equal((JSON.parse(there.body).data as Obj).format, "raw");
      await api.waitTask(await api.data("DELETE", `/nodes/pve1/qemu/${newid}`) as string);
      const gone = await rawRequest(sim, "GET", path);
      assert.deepEqual(
        [gone.status, gone.reason],
        [
          500,
          `rbd error: rbd: error opening image vm-${newid}-disk-0: (2) No such file or directory`,
        ],
      );
    }, { acl });
  }
});

Deno.test("destroy dying after its stub: the VMID keeps `lock: destroyed` only, status 'unexpected status'", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api, { pool: "bigfleet" });
    sim.faults.destroyDies = 1;
    const upid = await api.data("DELETE", `/nodes/pve1/qemu/${newid}`) as string;
    const st = await api.waitTask(upid);
    assert.equal(st.exitstatus, "unexpected status");
    const log = (await api.data("GET", `/nodes/pve1/tasks/${upid}/log`) as Obj[]).map((l) => l.t);
    assert.ok(!log.some((l) => String(l).startsWith("TASK")), JSON.stringify(log));
    // Still in its pool: the pool-only token reads the stub.
    const cfg = await api.data("GET", `/nodes/pve1/qemu/${newid}/config`) as Obj;
    assert.deepEqual(Object.keys(cfg).sort(), ["digest", "lock"]);
    assert.equal(cfg.lock, "destroyed");
    // A token cannot finish it: destroy checks the lock and skiplock is root's.
    const again = await api.data("DELETE", `/nodes/pve1/qemu/${newid}`) as string;
    assert.equal((await api.waitTask(again)).exitstatus, "VM is locked (destroyed)");
  }, { acl: poolOnly() });
});

Deno.test("tag policy: free, list, existing, none and registered tags for a token without Sys.Modify", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api, { pool: "bigfleet" });
    const put = (tags: string, more: Obj = {}) =>
      rawRequest(sim, "PUT", `/nodes/pve1/qemu/${newid}/config`, json({ tags, ...more }));
    const refused = (
      tag: string,
    ) => [403, `Permission check failed (/, Sys.Modify for modifying tag '${tag}')`];
    const tagsNow = () => sim.vm(newid)!.config.tags;
    // The clone inherited the template's k8s;template.
    assert.equal(tagsNow(), "k8s;template");
    // free (the default): anything not registered.
    assert.equal((await put("bigfleet;bigfleet-m1")).status, 200);
    assert.equal(tagsNow(), "bigfleet;bigfleet-m1");
    sim.editConfig(newid, { tags: "bigfleet;k8s" });
    // list: only user-allow-list, and removing an inherited tag is checked too.
    sim.faults.datacenter = { userTagAccess: { userAllow: "list", userAllowList: ["bigfleet"] } };
    const r1 = await put("bigfleet");
    assert.deepEqual([r1.status, r1.reason], refused("k8s"));
    const r2 = await put("bigfleet;k8s;bigfleet-m2");
    assert.deepEqual([r2.status, r2.reason], refused("bigfleet-m2"));
    assert.equal((await put("k8s;bigfleet")).status, 200, "the same set in another order");
    const r3 = await put("BigFleet;k8s");
    assert.deepEqual([r3.status, r3.reason], refused("BigFleet"), "compared raw, case kept");
    // existing: tags some guest the token may audit carries.
    sim.faults.datacenter = { userTagAccess: { userAllow: "existing" } };
    assert.equal((await put("bigfleet")).status, 200, "k8s exists (here), so it may go");
    assert.equal((await put("bigfleet;k8s")).status, 200, "the template still carries k8s");
    const r4 = await put("bigfleet;k8s;fresh1");
    assert.deepEqual([r4.status, r4.reason], refused("fresh1"), "no guest has fresh1");
    // none: nothing, not even the allow-list.
    sim.faults.datacenter = { userTagAccess: { userAllow: "none", userAllowList: ["zz"] } };
    const r5 = await put("bigfleet;k8s;zz");
    assert.deepEqual([r5.status, r5.reason], refused("zz"));
    assert.equal((await put("k8s;bigfleet", { cores: 3 })).status, 200, "unchanged tags pass");
    // registered-tags need Sys.Modify even under free.
    sim.faults.datacenter = { registeredTags: ["bigfleet"] };
    const r6 = await put("k8s");
    assert.deepEqual([r6.status, r6.reason], refused("bigfleet"));
    assert.equal((await put("bigfleet;k8s;other")).status, 200);
    // With Sys.Modify on / every tag goes.
    sim.faults.acl!.entries.push({ path: "/", privs: ["Sys.Modify"] });
    assert.equal((await put("x1")).status, 200);
  }, { acl: poolOnly() });
});

Deno.test("tag policy: a refused tag leaves the options written before it pending", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api, { pool: "bigfleet" });
    sim.faults.datacenter = { userTagAccess: { userAllow: "list", userAllowList: [] } };
    const r = await rawRequest(
      sim,
      "PUT",
      `/nodes/pve1/qemu/${newid}/config`,
      json({ cores: 4, description: "d", tags: "fresh" }),
    );
    assert.equal(r.status, 403);
    const vm = sim.vm(newid)!;
    assert.equal(vm.config.cores, 2, "not applied");
    assert.deepEqual(vm.pending, { cores: 4, description: "d" });
    // GET config shows them as if applied; current=1 and GET pending tell.
    const shown = await api.data("GET", `/nodes/pve1/qemu/${newid}/config`) as Obj;
    assert.equal(shown.cores, 4);
    const current = await api.data("GET", `/nodes/pve1/qemu/${newid}/config?current=1`) as Obj;
    assert.equal(current.cores, 2);
    const pending = await api.data("GET", `/nodes/pve1/qemu/${newid}/pending`) as Obj[];
    assert.deepEqual(pending.find((e) => e.key === "cores"), {
      key: "cores",
      value: 2,
      pending: 4,
    });
  }, { acl: poolOnly() });
});

Deno.test("cluster/options: all of datacenter.cfg with Sys.Audit on /, else allowed-tags only", async () => {
  const datacenter = {
    userTagAccess: { userAllow: "list" as const, userAllowList: ["bigfleet", "k8s"] },
    registeredTags: ["prod"],
    nextId: { lower: 5000, upper: 6000 },
  };
  await withSim(async (sim, api) => {
    assert.deepEqual(await api.data("GET", "/cluster/options"), {
      "allowed-tags": ["bigfleet", "k8s"],
    });
    sim.faults.acl!.entries.push({ path: "/", privs: ["Sys.Audit"] });
    assert.deepEqual(await api.data("GET", "/cluster/options"), {
      keyboard: "en-us",
      mac_prefix: "BC:24:11",
      description: "",
      "next-id": { lower: "5000", upper: "6000" },
      "user-tag-access": { "user-allow": "list", "user-allow-list": ["bigfleet", "k8s"] },
      "registered-tags": ["prod"],
      "allowed-tags": ["bigfleet", "k8s"],
    });
  }, { acl: poolOnly(), datacenter });
});

Deno.test("nextid: the lowest free VMID inside next-id [lower, upper); vmid= ignores the range", async () => {
  await withSim(async (sim, api) => {
    assert.equal(await api.data("GET", "/cluster/nextid"), "5000");
    sim.addVm({ vmid: 5000, name: "a", template: false });
    sim.addVm({ vmid: 5001, name: "b", template: false });
    assert.equal(await api.data("GET", "/cluster/nextid"), "5002");
    sim.addVm({ vmid: 5002, name: "c", template: false });
    const full = await rawRequest(sim, "GET", "/cluster/nextid");
    assert.deepEqual(
      [full.status, full.reason],
      [500, "unable to get any free VMID in range [5000, 5003]"],
    );
    assert.equal(await api.data("GET", "/cluster/nextid?vmid=777"), "777");
  }, { datacenter: { nextId: { lower: 5000, upper: 5003 } } });
});

Deno.test("pending: a running VM takes tags and description at once, cores and memory at its next start", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api, { name: "live" });
    await startAndBoot(api, "pve1", newid);
    await api.data("PUT", `/nodes/pve1/qemu/${newid}/config`, {
      json: { cores: 4, memory: "4096", tags: "bigfleet", description: "now" },
    });
    const vm = sim.vm(newid)!;
    assert.equal(vm.config.tags, "bigfleet");
    assert.equal(vm.config.description, "now");
    assert.deepEqual(vm.pending, { cores: 4, memory: "4096" });
    const st = await api.data("GET", `/nodes/pve1/qemu/${newid}/status/current`) as Obj;
    assert.equal(st.cpus, 2, "still running with the old size");
    // vcpus with cpu hotplug goes live.
    sim.editConfig(newid, { hotplug: "network,disk,cpu" });
    await api.data("PUT", `/nodes/pve1/qemu/${newid}/config`, { json: { vcpus: 1 } });
    assert.equal(sim.vm(newid)!.config.vcpus, 1);
    // Stop and start: the start applies what was pending.
    await api.waitTask(await api.data("POST", `/nodes/pve1/qemu/${newid}/status/stop`) as string);
    await api.waitTask(await api.data("POST", `/nodes/pve1/qemu/${newid}/status/start`) as string);
    const after = sim.vm(newid)!;
    assert.deepEqual(after.pending, {});
    assert.equal(after.config.cores, 4);
    assert.equal(after.config.memory, "4096");
    // A stopped VM applies a PUT at once.
    await api.waitTask(await api.data("POST", `/nodes/pve1/qemu/${newid}/status/stop`) as string);
    await api.data("PUT", `/nodes/pve1/qemu/${newid}/config`, { json: { cores: 1 } });
    assert.equal(sim.vm(newid)!.config.cores, 1);
  });
});

Deno.test("pending: GET config shows a pending cores/memory change applied; only current=1 and /pending tell them apart", async () => {
  await withSim(async (_sim, api) => {
    const { newid } = await cloneAndWait(api, { name: "pending" });
    await startAndBoot(api, "pve1", newid);
    const base = `/nodes/pve1/qemu/${newid}`;
    await api.data("PUT", `${base}/config`, { json: { cores: 4, memory: "4096" } });
    const shown = await api.data("GET", `${base}/config`) as Obj;
    assert.deepEqual([shown.cores, shown.memory], [4, "4096"]);
    const current = await api.data("GET", `${base}/config?current=1`) as Obj;
    assert.deepEqual([current.cores, current.memory], [2, "2048"]);
    const pending = await api.data("GET", `${base}/pending`) as Obj[];
    assert.deepEqual(pending.filter((e) => e.key === "cores" || e.key === "memory"), [
      { key: "cores", value: 2, pending: 4 },
      { key: "memory", value: "2048", pending: "4096" },
    ]);
  });
});

Deno.test("clone checks the template's options: host CD-ROM, vmstatestorage, mapped and host devices", async () => {
  const clone = (sim: Parameters<Parameters<typeof withSim>[0]>[0]) =>
    rawRequest(
      sim,
      "POST",
      "/nodes/pve1/qemu/9000/clone",
      json({ newid: 321, full: 1, pool: "bigfleet" }),
    );
  await withSim(async (sim) => {
    const cases: [Record<string, string | number | null>, number, string][] = [
      [{ ide2: "cdrom,media=cdrom" }, 403, "Permission check failed (/, Sys.Console)"],
      [
        { ide2: null, vmstatestorage: "local-lvm" },
        403,
        "Permission check failed (/storage/local-lvm, Datastore.AllocateSpace)",
      ],
      [
        { vmstatestorage: null, usb0: "mapping=dongle" },
        403,
        "Permission check failed (/mapping/usb/dongle, Mapping.Use)",
      ],
      [{ usb0: "host=1234:5678" }, 500, "only root can set 'usb0' config for real devices"],
      [
        { usb0: "spice", hostpci0: "mapping=gpu" },
        403,
        "Permission check failed (/mapping/pci/gpu, Mapping.Use)",
      ],
      [
        { hostpci0: "0000:01:00.0" },
        500,
        "only root can set 'hostpci0' config for non-mapped devices",
      ],
      [
        { hostpci0: null, rng0: "source=/dev/hwrng" },
        403,
        "Permission check failed (/mapping/hwrng, Mapping.Use)",
      ],
    ];
    for (const [edit, status, reason] of cases) {
      sim.editConfig(9000, edit);
      const r = await clone(sim);
      assert.deepEqual([r.status, r.reason], [status, reason], JSON.stringify(edit));
    }
    assert.equal(sim.tasks().length, 0, "refused before the fork");
    // The grants make it pass; an ISO CD-ROM and `spice` need none.
    sim.editConfig(9000, { rng0: null, ide2: "cdrom,media=cdrom", hostpci0: "mapping=gpu" });
    sim.faults.acl!.entries.push(
      { path: "/", privs: ["Sys.Console"] },
      { path: "/mapping/pci/gpu", privs: ["Mapping.Use"] },
    );
    assert.equal((await clone(sim)).status, 200);
  }, { acl: poolOnly() });
});

Deno.test("agent: `enabled=` takes every PVE boolean spelling; a bare value only 1 (else: no agent)", async () => {
  for (const agent of ["1", "enabled=on", "enabled=YES", "enabled=true,fstrim_cloned_disks=1"]) {
    await withSim(async (_sim, api) => {
      const { newid } = await cloneAndWait(api);
      await startAndBoot(api, "pve1", newid);
      await until(async () =>
        (await api.call("POST", `/nodes/pve1/qemu/${newid}/agent/ping`)).status === 200
      );
    }, { templates: [{ vmid: 9000, name: "t", agent }] });
  }
  await withSim(async (sim, api) => {
    // The API refuses a bare `on`; written into the file by hand it is dropped on read.
    const r = await rawRequest(sim, "PUT", "/nodes/pve1/qemu/9000/config", json({ agent: "on" }));
    assert.equal(r.status, 400);
    sim.editConfig(9000, { agent: "on" });
    const cfg = await api.data("GET", "/nodes/pve1/qemu/9000/config") as Obj;
    assert.equal(cfg.agent, undefined);
  });
});
