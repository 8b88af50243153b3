// Self-tests of the PVE 8 / 9 switch (versions.ts, routes/userconfig.ts): the
// privilege names each version knows, the guest agent's per-command
// privileges, clone and destroy task logs, `memhost`, the custom CPU check
// of qemu-server ≥ 9.1.15 and pool names. Texts as seen on a real PVE 9.2.11
// (issue 25) and in the 8.4 / 9.x sources.

import assert from "node:assert/strict";
import { knownPrivileges } from "./acl.ts";
import { cloneAndWait, rawRequest, startAndBoot, withSim } from "./testkit.ts";
import type { SimAcl } from "./types.ts";

type Obj = Record<string, unknown>;
const PVE9 = "9.2.11";
const FAST = { cloneMs: 30, cloneNamelessMs: 10, taskMs: 10, agentBootMs: 20 };

const json = (body: unknown) => ({
  body: JSON.stringify(body),
  headers: { "Content-Type": "application/json" },
});

/** Every privilege of the version on `/`, and on /vms the VM ones plus `agent` only. */
function agentAcl(version: string, agent: string[]): SimAcl {
  const all = knownPrivileges(version);
  const isAgent = (p: string) => p.startsWith("VM.GuestAgent.") || p === "VM.Monitor";
  const vm = all.filter((p) => p.startsWith("VM.") && !isAgent(p));
  return {
    entries: [
      { path: "/", privs: all.filter((p) => !isAgent(p)), propagate: true },
      { path: "/vms", privs: [...vm, ...agent], propagate: true },
    ],
  };
}

Deno.test("roles: PVE 9 refuses VM.Monitor (400 invalid privilege 'VM.Monitor'), PVE 8 the VM.GuestAgent names", async () => {
  await withSim(async (sim, api) => {
    const create = await rawRequest(
      sim,
      "POST",
      "/access/roles",
      json({ roleid: "BigFleetVM", privs: "VM.Audit,VM.Monitor" }),
    );
    assert.equal(create.status, 400);
    assert.equal(create.reason, "Parameter verification failed.");
    assert.deepEqual(JSON.parse(create.body).errors, {
      privs: "invalid format - invalid privilege 'VM.Monitor'\n",
    });
    await api.data("POST", "/access/roles", {
      json: { roleid: "BigFleetVM", privs: "VM.Audit,VM.GuestAgent.Audit" },
    });
    const modify = await api.call("PUT", "/access/roles/BigFleetVM", {
      json: { privs: "VM.Monitor", append: 1 },
    });
    assert.equal(modify.status, 400);
    assert.deepEqual(modify.body.errors, {
      privs: "invalid format - invalid privilege 'VM.Monitor'\n",
    });
    const roles = await api.data("GET", "/access/roles") as Obj[];
    assert.deepEqual(roles.find((r) => r.roleid === "BigFleetVM"), {
      roleid: "BigFleetVM",
      privs: "VM.Audit,VM.GuestAgent.Audit",
      special: 0,
    });
    const again = await api.call("POST", "/access/roles", { json: { roleid: "BigFleetVM" } });
    assert.equal(again.body.message, "create role failed: role 'BigFleetVM' already exists\n");
    const admin = await api.call("PUT", "/access/roles/Administrator", { json: { privs: "" } });
    assert.equal(admin.body.message, "auto-generated role 'Administrator' cannot be modified\n");
    // An 8.x user.cfg listing VM.Monitor loads, and the name is dropped.
    sim.faults.acl = { entries: [{ path: "/vms", privs: ["VM.Audit", "VM.Monitor"] }] };
    const p = await api.data("GET", "/access/permissions?path=/vms") as Obj;
    assert.deepEqual(p["/vms"], { "VM.Audit": 0 });
  }, { pveVersion: PVE9 });

  await withSim(async (_sim, api) => {
    await api.data("POST", "/access/roles", {
      json: { roleid: "BigFleetVM", privs: "VM.Audit,VM.Monitor" },
    });
    const r = await api.call("POST", "/access/roles", {
      json: { roleid: "BigFleetAgent", privs: "VM.GuestAgent.Audit" },
    });
    assert.equal(r.status, 400);
    assert.deepEqual(r.body.errors, {
      privs: "invalid format - invalid privilege 'VM.GuestAgent.Audit'\n",
    });
  });
});

Deno.test("agent: PVE 9 checks each command's privilege: exec needs VM.GuestAgent.Unrestricted; PVE 8 VM.Monitor", async () => {
  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api, { name: "agent9" });
    await startAndBoot(api, "pve1", newid);
    const base = `/nodes/pve1/qemu/${newid}/agent`;
    const calls = {
      exec: () => rawRequest(sim, "POST", `${base}/exec`, json({ command: ["true"] })),
      status: () => rawRequest(sim, "GET", `${base}/exec-status?pid=1`),
      write: () =>
        rawRequest(sim, "POST", `${base}/file-write`, json({ file: "/tmp/x", content: "x" })),
      ping: () => rawRequest(sim, "POST", `${base}/ping`),
      osinfo: () => rawRequest(sim, "GET", `${base}/get-osinfo`),
    };
    // As seen: with Audit + FileRead + FileWrite, exec and exec-status are refused.
    sim.faults.acl = agentAcl(PVE9, [
      "VM.GuestAgent.Audit",
      "VM.GuestAgent.FileRead",
      "VM.GuestAgent.FileWrite",
    ]);
    for (const call of [calls.exec, calls.status]) {
      const r = await call();
      assert.deepEqual(
        [r.status, r.reason],
        [403, `Permission check failed (/vms/${newid}, VM.GuestAgent.Unrestricted)`],
      );
    }
    for (const call of [calls.write, calls.ping, calls.osinfo]) {
      assert.equal((await call()).status, 200);
    }
    // Audit alone: no file-write.
    sim.faults.acl = agentAcl(PVE9, ["VM.GuestAgent.Audit"]);
    const write = await calls.write();
    assert.deepEqual([write.status, write.reason], [
      403,
      `Permission check failed (/vms/${newid}, VM.GuestAgent.FileWrite|VM.GuestAgent.Unrestricted)`,
    ]);
    assert.equal((await calls.ping()).status, 200);
    // Unrestricted does for every command.
    sim.faults.acl = agentAcl(PVE9, ["VM.GuestAgent.Unrestricted"]);
    for (const call of [calls.exec, calls.write, calls.ping, calls.osinfo]) {
      assert.equal((await call()).status, 200);
    }
  }, { pveVersion: PVE9, timing: FAST });

  await withSim(async (sim, api) => {
    const { newid } = await cloneAndWait(api, { name: "agent8" });
    await startAndBoot(api, "pve1", newid);
    sim.faults.acl = agentAcl("8.4.1", ["VM.GuestAgent.Unrestricted"]);
    const ping = await rawRequest(sim, "POST", `/nodes/pve1/qemu/${newid}/agent/ping`);
    assert.deepEqual(
      [ping.status, ping.reason],
      [403, `Permission check failed (/vms/${newid}, VM.Monitor)`],
    );
    sim.faults.acl = agentAcl("8.4.1", ["VM.Monitor"]);
    const exec = await rawRequest(
      sim,
      "POST",
      `/nodes/pve1/qemu/${newid}/agent/exec`,
      json({ command: ["true"] }),
    );
    assert.equal(exec.status, 200);
  }, { timing: FAST });
});

Deno.test("clone log: PVE 9 starts `creating a clone of VM 9000 with ID 100`, a full clone logs `allocated target volume`", async () => {
  const logOf = async (version: string, full: number) => {
    let lines: string[] = [];
    await withSim(async (_sim, api) => {
      const { upid, status } = await cloneAndWait(api, { full });
      assert.equal(status.exitstatus, "OK");
      const log = await api.data("GET", `/nodes/pve1/tasks/${upid}/log`) as { t: string }[];
      lines = log.map((l) => l.t);
    }, { pveVersion: version, timing: FAST });
    return lines;
  };
  assert.deepEqual(await logOf(PVE9, 1), [
    "creating a clone of VM 9000 with ID 100",
    "create full clone of drive scsi0 (ceph-vm:base-9000-disk-0)",
    "allocated target volume 'ceph-vm:vm-100-disk-0'",
    "TASK OK",
  ]);
  assert.deepEqual(await logOf(PVE9, 0), [
    "creating a clone of VM 9000 with ID 100",
    "create linked clone of drive scsi0 (ceph-vm:base-9000-disk-0)",
    "TASK OK",
  ]);
  assert.deepEqual(await logOf("8.4.1", 1), [
    "create full clone of drive scsi0 (ceph-vm:base-9000-disk-0)",
    "TASK OK",
  ]);
});

Deno.test("memhost: PVE 9's status/current and /cluster/resources carry it, PVE 8's do not", async () => {
  for (const [version, has] of [[PVE9, true], ["8.4.1", false]] as const) {
    await withSim(async (_sim, api) => {
      const { newid } = await cloneAndWait(api);
      await startAndBoot(api, "pve1", newid);
      const st = await api.data("GET", `/nodes/pve1/qemu/${newid}/status/current`) as Obj;
      assert.equal("memhost" in st, has, version);
      if (has) assert.equal(st.memhost, st.mem);
      const res = await api.data("GET", "/cluster/resources?type=vm") as Obj[];
      assert.equal("memhost" in res.find((e) => e.vmid === newid)!, has, version);
    }, { pveVersion: version, timing: { ...FAST, resourcesLagMs: 0 } });
  }
});

Deno.test("destroy: qemu-server ≥ 9.1.19 logs `WARN: Could not remove disk …` and ends `WARNINGS: 2`; older ones plain and OK", async () => {
  const unlink = (vmid: number) =>
    `unlink '/var/lib/vz/images/${vmid}/vm-${vmid}-disk-0.qcow2' failed - Operation not permitted`;
  const destroy = async (opts: { pveVersion: string; qemuServerVersion?: string }) => {
    let out: { exit: unknown; log: string[]; disk: string; vmid: number } | undefined;
    await withSim(async (sim, api) => {
      const { newid } = await cloneAndWait(api, { name: "leaky" });
      const disk = String(sim.vm(newid)!.config.scsi0).split(",")[0];
      sim.faults.volumeFreeFailures = [{ match: disk, message: unlink(newid) }];
      const upid = await api.data(
        "DELETE",
        `/nodes/pve1/qemu/${newid}?purge=1&destroy-unreferenced-disks=1`,
      ) as string;
      const st = await api.waitTask(upid);
      const log = await api.data("GET", `/nodes/pve1/tasks/${upid}/log`) as { t: string }[];
      out = { exit: st.exitstatus, log: log.map((l) => l.t), disk, vmid: newid };
    }, { ...opts, timing: FAST });
    return out!;
  };
  const nine = await destroy({ pveVersion: PVE9 });
  assert.equal(nine.exit, "WARNINGS: 2");
  assert.deepEqual(nine.log, [
    `WARN: Could not remove disk '${nine.disk}', check manually: ${unlink(nine.vmid)}`,
    `WARN: ${unlink(nine.vmid)}`,
    `purging VM ${nine.vmid} from related configurations..`,
    "TASK WARNINGS: 2",
  ]);
  for (const opts of [{ pveVersion: PVE9, qemuServerVersion: "9.1.18" }, { pveVersion: "8.4.1" }]) {
    const old = await destroy(opts);
    assert.equal(old.exit, "OK", JSON.stringify(opts));
    assert.deepEqual(old.log, [
      `Could not remove disk '${old.disk}', check manually: ${unlink(old.vmid)}`,
      unlink(old.vmid),
      `purging VM ${old.vmid} from related configurations..`,
      "TASK OK",
    ]);
  }
});

Deno.test("clone of a custom CPU model: qemu-server ≥ 9.1.15 wants Mapping.Use (403 Permission check failed (/mapping/cpu/bigfleet, Mapping.Use))", async () => {
  const withoutMapping: SimAcl = {
    entries: [{
      path: "/",
      privs: knownPrivileges(PVE9).filter((p) => p !== "Mapping.Use"),
      propagate: true,
    }],
  };
  const templates = [
    { vmid: 9000, name: "tmpl-custom", config: { cpu: "custom-bigfleet" } },
    { vmid: 9001, name: "tmpl-cputype", config: { cpu: "cputype=custom-bigfleet,flags=+aes" } },
    { vmid: 9002, name: "tmpl-host", config: { cpu: "host" } },
  ];
  const clone = (sim: Parameters<typeof rawRequest>[0], src: number, newid: number) =>
    rawRequest(sim, "POST", `/nodes/pve1/qemu/${src}/clone`, json({ newid, full: 1 }));
  await withSim(async (sim) => {
    for (const [src, newid] of [[9000, 100], [9001, 101]]) {
      const r = await clone(sim, src, newid);
      assert.deepEqual(
        [r.status, r.reason],
        [403, "Permission check failed (/mapping/cpu/bigfleet, Mapping.Use)"],
      );
    }
    assert.equal((await clone(sim, 9002, 102)).status, 200, "a built-in model needs nothing");
    sim.faults.acl = {
      entries: [
        ...withoutMapping.entries,
        { path: "/mapping/cpu/bigfleet", privs: ["Mapping.Use"] },
      ],
    };
    assert.equal((await clone(sim, 9000, 103)).status, 200);
  }, { pveVersion: PVE9, templates, acl: withoutMapping, timing: FAST });
  // Before 9.1.15 (and on PVE 8) nothing about the CPU is checked at clone time.
  for (const opts of [{ pveVersion: "9.0.3" }, { pveVersion: "8.4.1" }]) {
    await withSim(async (sim) => {
      assert.equal((await clone(sim, 9000, 100)).status, 200, opts.pveVersion);
    }, { ...opts, templates, acl: withoutMapping, timing: FAST });
  }
});

Deno.test("pools: from PVE 9 a pool name must start with a letter; PVE 8 takes `1x`", async () => {
  await withSim(async (sim, api) => {
    const r = await rawRequest(sim, "POST", "/pools", json({ poolid: "1x" }));
    assert.equal(r.status, 400);
    assert.deepEqual(JSON.parse(r.body).errors, {
      poolid: "invalid format - pool name '1x' contains invalid characters\n",
    });
    await api.data("POST", "/pools", { json: { poolid: "x1" } });
    const dup = await api.call("POST", "/pools", { json: { poolid: "bigfleet" } });
    assert.equal(dup.body.message, "create pool failed: pool 'bigfleet' already exists\n");
    const pools = await api.data("GET", "/pools") as Obj[];
    assert.deepEqual(pools.map((p) => p.poolid), ["bigfleet", "x1"]);
  }, { pveVersion: PVE9 });
  await withSim(async (_sim, api) => {
    await api.data("POST", "/pools", { json: { poolid: "1x" } });
    const bad = await api.call("POST", "/pools", { json: { poolid: "a b" } });
    assert.deepEqual(bad.body.errors, {
      poolid: "invalid format - pool name 'a b' contains invalid characters\n",
    });
  });
});
