// Self-tests of the VM lifecycle: clone phases, inheritance, races, config
// PUT, locks, start/stop/destroy, and the cluster/resources lag.

import assert from "node:assert/strict";
import { type Api, cloneAndWait, rawRequest, until, withSim } from "./testkit.ts";

type Obj = Record<string, unknown>;
const resources = async (api: Api) =>
  (await api.data("GET", "/cluster/resources?type=vm")) as Obj[];

Deno.test("clone: phases (nameless lock, full config, moved to target) and inheritance", async () => {
  await withSim(async (sim, api) => {
    const upid = await api.data("POST", "/nodes/pve1/qemu/9000/clone", {
      json: {
        newid: 101,
        name: "bigfleet-small-1",
        full: 1,
        target: "pve2",
        pool: "bigfleet",
        description: "BigFleet managed VM. machine_id=m1",
      },
    }) as string;
    // Phase 1: the temporary config `# qmclone temporary file\nlock: clone\n`, on
    // the source node: its comment line reads back as the description (as on the rig).
    const temp = await until(async () => {
      const r = await api.call("GET", "/nodes/pve1/qemu/101/config");
      return r.status === 200 ? r.body.data : null;
    });
    assert.deepEqual(Object.keys(temp).sort(), ["description", "digest", "lock"]);
    assert.equal(temp.lock, "clone");
    assert.equal(temp.description, " qmclone temporary file");
    assert.match(temp.digest, /^[0-9a-f]{40}$/);
    const cur = await api.data("GET", "/nodes/pve1/qemu/101/status/current") as Obj;
    assert.equal(cur.name, "VM 101");
    assert.equal(cur.lock, "clone");
    const early = (await resources(api)).find((r) => r.vmid === 101)!;
    assert.equal(early.status, "unknown");
    assert.equal(early.lock, "clone");
    assert.equal("name" in early, false);
    assert.equal("tags" in early, false);
    // The target node does not know the VM yet.
    assert.equal((await api.call("GET", "/nodes/pve2/qemu/101/config")).status, 500);
    // A locked VM refuses config changes.
    const locked = await rawRequest(sim, "PUT", "/nodes/pve1/qemu/101/config", {
      body: JSON.stringify({ cores: 4 }),
      headers: { "Content-Type": "application/json" },
    });
    assert.equal(locked.status, 500);
    assert.equal(locked.reason, "VM is locked (clone)");

    // Phase 2: full config, still locked.
    const full = await until(async () => {
      const c = await api.data("GET", "/nodes/pve1/qemu/101/config") as Obj;
      return c.name ? c : null;
    }) as Obj;
    assert.equal(full.lock, "clone");
    assert.equal(full.name, "bigfleet-small-1");
    assert.equal(full.description, "BigFleet managed VM. machine_id=m1");
    assert.equal(full.tags, "k8s;template");
    assert.equal(full.agent, "1");
    assert.equal(full.memory, "2048");
    assert.equal(full.cores, 2);
    assert.equal("template" in full, false);
    const tmpl = sim.vm(9000)!;
    assert.notEqual(full.net0, tmpl.config.net0);
    assert.notEqual(full.smbios1, tmpl.config.smbios1);
    assert.equal(full.scsi0, "ceph-vm:vm-101-disk-0,size=20G");

    // Phase 3: done, moved, in the pool.
    const st = await api.waitTask(upid);
    assert.equal(st.exitstatus, "OK");
    assert.equal((await api.call("GET", "/nodes/pve1/qemu/101/config")).status, 500);
    const moved = await api.data("GET", "/nodes/pve2/qemu/101/config") as Obj;
    assert.equal("lock" in moved, false);
    const vm = sim.vm(101)!;
    assert.equal(vm.node, "pve2");
    assert.equal(vm.pool, "bigfleet");
    assert.equal(vm.status, "stopped");
    const entry = await until(async () => {
      const e = (await resources(api)).find((r) => r.vmid === 101)!;
      return e.name ? e : null;
    });
    assert.deepEqual(
      [entry.node, entry.status, entry.name, entry.template, entry.pool],
      ["pve2", "stopped", "bigfleet-small-1", 0, "bigfleet"],
    );
  }, { timing: { cloneNamelessMs: 150, cloneMs: 400, resourcesLagMs: 100 } });
});

Deno.test("clone into a reused VMID: /cluster/resources shows the old VM's name until pvestatd sees the new one", async () => {
  await withSim(async (sim, api) => {
    const first = await cloneAndWait(api, { newid: 777, name: "old-one" });
    assert.equal(first.status.exitstatus, "OK");
    await until(async () => (await resources(api)).find((r) => r.vmid === 777)?.name === "old-one");
    await api.waitTask(String(await api.data("DELETE", "/nodes/pve1/qemu/777")));
    const again = await cloneAndWait(api, { newid: 777, name: "new-one" });
    assert.equal(again.status.exitstatus, "OK");
    // The listing's name is the RRD's (qemu/777): the previous VM's, the config's own is new.
    assert.equal((await resources(api)).find((r) => r.vmid === 777)?.name, "old-one");
    assert.equal(sim.vm(777)!.config.name, "new-one");
    await until(async () => (await resources(api)).find((r) => r.vmid === 777)?.name === "new-one");
  }, { timing: { cloneMs: 30, cloneNamelessMs: 10, resourcesLagMs: 300 } });
});

Deno.test("clone: defaults (linked for template, Copy-of-VM name, template description)", async () => {
  await withSim(async (sim, api) => {
    const { newid, status } = await cloneAndWait(api, { full: undefined });
    assert.equal(status.exitstatus, "OK");
    const c = sim.vm(newid)!.config;
    assert.equal(c.name, "Copy-of-VM-tmpl-k8s");
    assert.equal(c.description, "base");
    assert.equal(c.scsi0, `ceph-vm:base-9000-disk-0/vm-${newid}-disk-0,size=20G`);
    // Linked-clone options and full copies of non-templates.
    const storage = await api.call("POST", "/nodes/pve1/qemu/9000/clone", {
      json: { newid: 300, storage: "local-lvm" },
    });
    assert.equal(storage.status, 500);
    assert.equal(storage.body.message, "parameter 'storage' not allowed for linked clones\n");
  }, { timing: { cloneMs: 30, cloneNamelessMs: 10 } });
});

Deno.test("clone: synchronous checks (pool 403, target, source, lock, newid exists)", async () => {
  await withSim(async (sim, api) => {
    const pool = await rawRequest(sim, "POST", "/nodes/pve1/qemu/9000/clone", {
      body: "newid=200&pool=nope",
      headers: { "Content-Type": "application/x-www-form-urlencoded" },
    });
    assert.equal(pool.status, 403);
    assert.equal(pool.reason, "Permission check failed (pool 'nope' does not exist)");
    const target = await api.call("POST", "/nodes/pve1/qemu/9000/clone", {
      json: { newid: 200, target: "pve7" },
    });
    assert.equal(target.body.message, "no such cluster node 'pve7'\n");
    // clone_vm's check_running asks for the config on this node first (seen on a real cluster).
    const wrongNode = await api.call("POST", "/nodes/pve2/qemu/9000/clone", {
      json: { newid: 200 },
    });
    assert.equal(
      wrongNode.body.message,
      "unable to find configuration file for VM 9000 on node 'pve2'\n",
    );
    const local = await api.call("POST", "/nodes/pve1/qemu/9001/clone", {
      json: { newid: 200, target: "pve2" },
    });
    assert.equal(local.body.message, "can't clone VM to node 'pve2' (VM uses local storage)\n");
    const exists = await api.call("POST", "/nodes/pve1/qemu/9000/clone", {
      json: { newid: 9001 },
    });
    assert.equal(exists.status, 500);
    assert.equal(exists.body.message, "unable to create VM 9001: config file already exists\n");
    // No task was started by any of these.
    assert.equal(sim.tasks().length, 0);
  }, {
    templates: [
      { vmid: 9000, name: "tmpl-k8s" },
      { vmid: 9001, name: "tmpl-local", sharedStorage: false },
    ],
  });
});

Deno.test("clone: natural same-newid race fails the loser's task", async () => {
  await withSim(async (sim, api) => {
    const body = { json: { newid: 100, full: 1 } };
    const [a, b] = await Promise.all([
      api.data("POST", "/nodes/pve1/qemu/9000/clone", body),
      api.data("POST", "/nodes/pve1/qemu/9000/clone", body),
    ]) as string[];
    const [sa, sb] = [await api.waitTask(a), await api.waitTask(b)];
    assert.equal(sa.exitstatus, "OK");
    assert.equal(
      sb.exitstatus,
      "can't lock file '/var/lock/qemu-server/lock-100.conf' - got timeout",
    );
    // A second clone after the first finished is refused synchronously.
    const again = await api.call("POST", "/nodes/pve1/qemu/9000/clone", body);
    assert.equal(again.body.message, "unable to create VM 100: config file already exists\n");
    assert.equal(sim.vms().length, 2);
  }, { timing: { cloneMs: 200, cloneNamelessMs: 50, lockTimeoutMs: 50 } });
});

Deno.test("clone: injected nextid races, all four kinds", async () => {
  await withSim(async (sim, api) => {
    const cases: [typeof sim.faults.nextidRaceKind, string][] = [
      ["config-exists", "unable to create VM 100: config file already exists"],
      ["lock-timeout", "can't lock file '/var/lock/qemu-server/lock-101.conf' - got timeout"],
      [
        "other-node",
        "close (rename) atomic file '/etc/pve/nodes/pve1/qemu-server/102.conf' failed: File exists",
      ],
    ];
    for (const [kind, text] of cases) {
      sim.faults.nextidRace = 1;
      sim.faults.nextidRaceKind = kind;
      const { newid, status } = await cloneAndWait(api);
      assert.equal(status.exitstatus, text, kind);
      assert.equal(sim.faults.nextidRace, 0);
      await until(() => sim.vm(newid)?.foreign);
    }
    assert.equal(sim.vm(102)?.node, "pve2");
    sim.faults.nextidRace = 1;
    sim.faults.nextidRaceKind = "sync";
    const newid = Number(await api.data("GET", "/cluster/nextid"));
    const r = await api.call("POST", "/nodes/pve1/qemu/9000/clone", { json: { newid } });
    assert.equal(r.status, 500);
    assert.equal(r.body.message, `unable to create VM ${newid}: config file already exists\n`);
    // A retry with a fresh nextid succeeds.
    const ok = await cloneAndWait(api);
    assert.equal(ok.status.exitstatus, "OK");
    assert.equal(sim.vm(ok.newid)?.foreign, false);
  }, { timing: { cloneMs: 30, cloneNamelessMs: 10, lockTimeoutMs: 40 } });
});

Deno.test("clone: warnings, injected task error removes the new VM", async () => {
  await withSim(async (sim, api) => {
    sim.faults.cloneWarnings = true;
    const w = await cloneAndWait(api);
    assert.equal(w.status.exitstatus, "WARNINGS: 1");
    assert.ok(sim.vm(w.newid));
    sim.faults.cloneWarnings = false;
    sim.faults.taskError.qmclone = { message: "storage full", times: 1 };
    const e = await cloneAndWait(api);
    assert.equal(e.status.exitstatus, "clone failed: storage full");
    assert.equal(sim.vm(e.newid), undefined);
    assert.equal(sim.faults.taskError.qmclone, undefined);
    const ok = await cloneAndWait(api);
    assert.equal(ok.status.exitstatus, "OK");
  }, { timing: { cloneMs: 30, cloneNamelessMs: 10 } });
});

Deno.test("config PUT: tags normalised, validation, digest, balloon, no options", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api);
    const path = `/nodes/pve1/qemu/${newid}/config`;
    assert.equal(
      (await api.call("PUT", path, {
        json: { cores: 4, memory: 4096, tags: "BigFleet;bigfleet-M-1,zeta b", description: "d" },
      })).status,
      200,
    );
    const c = await api.data("GET", path) as Obj;
    assert.equal(c.tags, "b;bigfleet;bigfleet-m-1;zeta");
    assert.equal(c.memory, "4096");
    assert.equal(c.cores, 4);
    const res = (await resources(api)).find((r) => r.vmid === newid)!;
    assert.equal(res.tags, "b;bigfleet;bigfleet-m-1;zeta");
    const badTag = await api.call("PUT", path, { json: { tags: "ok;bad/tag" } });
    assert.equal(badTag.status, 400);
    assert.deepEqual(badTag.body.errors, { tags: "invalid format - invalid characters in tag\n" });
    const long = await api.call("PUT", path, { json: { description: "x".repeat(8193) } });
    assert.deepEqual(long.body.errors, { description: "value may only be 8192 characters long" });
    assert.equal(
      (await api.call("PUT", path, { json: { description: "x".repeat(8192) } })).status,
      200,
    );
    const zero = await api.call("PUT", path, { json: { cores: 0 } });
    assert.equal(zero.status, 400);
    const none = await api.call("PUT", path, { json: {} });
    assert.equal(none.body.message, "no options specified\n");
    const digest = await api.call("PUT", path, { json: { cores: 2, digest: "0000" } });
    assert.equal(digest.body.message, "checksum mismatch (file change by other user?)\n");
    const skip = await api.call("PUT", path, { json: { cores: 2, skiplock: 1 } });
    assert.deepEqual(skip.body.errors, { skiplock: "Only root may use this option." });
    await api.data("PUT", path, { json: { balloon: 2048 } });
    const balloon = await api.call("PUT", path, { json: { memory: 1024 } });
    assert.equal(
      balloon.body.message,
      "balloon value too large (must be smaller than assigned memory)\n",
    );
    await api.data("PUT", path, { json: { delete: "balloon", description: "trailing  \n\n" } });
    const after = await api.data("GET", path) as Obj;
    assert.equal("balloon" in after, false);
    assert.equal(after.description, "trailing");
    assert.equal(sim.vm(newid)?.description, "trailing  \n\n");
  }, { timing: { cloneMs: 30, cloneNamelessMs: 10 } });
});

Deno.test("power: start/stop tasks, already running, destroy rules", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api);
    const base = `/nodes/pve1/qemu/${newid}`;
    const start = await api.data("POST", `${base}/status/start`) as string;
    assert.match(start, new RegExp(`:qmstart:${newid}:bigfleet@pve!autoscaler:$`));
    assert.equal((await api.waitTask(start)).exitstatus, "OK");
    const cur = await api.data("GET", `${base}/status/current`) as Obj;
    assert.deepEqual([cur.status, cur.qmpstatus, cur.agent], ["running", "running", 1]);
    const again = await api.waitTask(await api.data("POST", `${base}/status/start`) as string);
    assert.equal(again.exitstatus, `VM ${newid} already running`);
    const del = await rawRequest(sim, "DELETE", `${base}?purge=1&destroy-unreferenced-disks=1`);
    assert.equal(del.status, 500);
    assert.equal(del.reason, `VM ${newid} is running - destroy failed`);
    const stop = await api.data("POST", `${base}/status/stop`) as string;
    assert.equal((await api.waitTask(stop)).exitstatus, "OK");
    // Stopping a stopped VM is fine.
    assert.equal(
      (await api.waitTask(await api.data("POST", `${base}/status/stop`) as string)).exitstatus,
      "OK",
    );
    const d = await api.data("DELETE", `${base}?purge=1&destroy-unreferenced-disks=1`) as string;
    assert.match(d, /:qmdestroy:/);
    await until(() => sim.vm(newid)?.lock === "destroyed");
    assert.equal((await api.waitTask(d)).exitstatus, "OK");
    assert.equal(sim.vm(newid), undefined);
    assert.equal((await api.call("GET", `${base}/config`)).status, 500);
    // Start of a missing VM: accepted, then the task fails.
    const ghost = await api.waitTask(await api.data("POST", `${base}/status/start`) as string);
    assert.equal(
      ghost.exitstatus,
      `Configuration file 'nodes/pve1/qemu-server/${newid}.conf' does not exist`,
    );
    const ghostStop = await api.waitTask(await api.data("POST", `${base}/status/stop`) as string);
    assert.equal(
      ghostStop.exitstatus,
      `unable to find configuration file for VM ${newid} on node 'pve1'`,
    );
    assert.equal((await api.call("DELETE", `${base}`)).status, 500);
  }, { timing: { cloneMs: 30, cloneNamelessMs: 10, taskMs: 20 } });
});

Deno.test("locks: start and destroy of a cloning VM fail in the task", async () => {
  await withSim(async (sim, api) => {
    const upid = await api.data("POST", "/nodes/pve1/qemu/9000/clone", {
      json: { newid: 100 },
    }) as string;
    await until(() => sim.vm(100));
    const start = await api.waitTask(
      await api.data("POST", "/nodes/pve1/qemu/100/status/start") as string,
    );
    assert.equal(start.exitstatus, "VM is locked (clone)");
    const del = await api.waitTask(await api.data("DELETE", "/nodes/pve1/qemu/100") as string);
    assert.equal(del.exitstatus, "VM is locked (clone)");
    assert.equal((await api.waitTask(upid)).exitstatus, "OK");
    assert.equal(sim.vm(100)?.lock, undefined);
  }, { timing: { cloneMs: 300, cloneNamelessMs: 100 } });
});

Deno.test("resources lag: status flips late, out-of-band stop and delete", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api);
    const entry = async () => (await resources(api)).find((r) => r.vmid === newid);
    // The stopped clone shows up in the resources once the lag has passed; then it is started.
    await until(async () => (await entry())?.status === "stopped");
    await api.waitTask(await api.data("POST", `/nodes/pve1/qemu/${newid}/status/start`) as string);
    assert.equal((await entry())?.status, "stopped", "the start is not listed yet");
    await until(async () => (await entry())?.status === "running");
    sim.stopVmOutOfBand(newid);
    const cur = await api.data("GET", `/nodes/pve1/qemu/${newid}/status/current`) as Obj;
    assert.equal(cur.status, "stopped");
    assert.equal(sim.vm(newid)?.stops, 1);
    sim.deleteVmOutOfBand(newid);
    assert.equal(await entry(), undefined);
    // The taskError switch for other task types.
    sim.addVm({ vmid: 500, name: "plain", template: false, running: true });
    sim.faults.taskError.qmstop = "got unexpected control message";
    const stop = await api.waitTask(
      await api.data("POST", "/nodes/pve1/qemu/500/status/stop") as string,
    );
    assert.equal(stop.exitstatus, "got unexpected control message");
    assert.equal(sim.vm(500)?.status, "running");
  }, { timing: { cloneMs: 30, cloneNamelessMs: 10, resourcesLagMs: 150, taskMs: 10 } });
});
