// The catalog fields users ask for (disk_gib, storage, clone, network) and
// --proxmox-vmid-range, through the real provider process against the
// simulator: what each Create asks Proxmox for and what the VM ends up as,
// the startup refusals of what storage.cfg and the template's config can
// tell, and a clone refused for its target worded with the fix. A retry
// that adopts the VM changes nothing again (the backend in-process, where a
// second Create of one slot is one call).

import assert from "node:assert/strict";
import type { InstanceType } from "../../src/config/types.ts";
import { Harness, MachineState, runUntilExit, startProvider } from "../harness/mod.ts";
import type { ProviderProcess } from "../harness/mod.ts";
import { type SimOptions, type Simulator, startSimulator } from "../pvesim/mod.ts";
import { DEFAULT_TEMPLATE, providerArgs, rig, signal, slot, vmidOf } from "./helpers.ts";

const T = { sanitizeOps: false, sanitizeResources: false };
const FAST_SIM = { cloneMs: 120, cloneNamelessMs: 40, taskMs: 20, agentBootMs: 80, execMs: 20 };

type Catalog = Record<string, Record<string, unknown>>;

interface Rig {
  sim: Simulator;
  /** The provider's flags with this catalog, one slot of each [type, zone], and `extra`. */
  args(catalog: Catalog, slots: [string, string][], extra?: string[]): Promise<string[]>;
  /** A provider on those flags, and a harness on it, for `fn`. */
  serve(
    catalog: Catalog,
    slots: [string, string][],
    fn: (h: Harness, p: ProviderProcess) => Promise<void>,
    extra?: string[],
  ): Promise<void>;
}

async function withRig(simOpts: SimOptions, fn: (r: Rig) => Promise<void>): Promise<void> {
  const sim = await startSimulator({ nodes: ["pve1", "pve2"], timing: FAST_SIM, ...simOpts });
  const dir = await Deno.makeTempDir({ prefix: "bf-pve-types-" });
  await Deno.writeTextFile(`${dir}/token`, sim.tokenSecret);
  let n = 0;
  const args = async (catalog: Catalog, slots: [string, string][], extra: string[] = []) => {
    const at = `${dir}/${n++}`;
    await Deno.writeTextFile(`${at}-types.json`, JSON.stringify(catalog));
    const offerings = slots.map(([t, zone]) => ({ instance_type: t, zone, count: 1 }));
    await Deno.writeTextFile(`${at}-offerings.json`, JSON.stringify(offerings));
    return [
      ...providerArgs(sim, `${dir}/token`),
      `--instance-types=${at}-types.json`,
      `--offerings=${at}-offerings.json`,
      ...extra,
    ];
  };
  try {
    await fn({
      sim,
      args,
      async serve(catalog, slots, body, extra = []) {
        const p = await startProvider({ args: await args(catalog, slots, extra) });
        const h = new Harness(p.addr);
        try {
          await body(h, p);
        } finally {
          h.close();
          await p.stop();
        }
      },
    });
  } finally {
    await sim.close();
    await Deno.remove(dir, { recursive: true });
  }
}

/** Create `id` and wait for IDLE; its VMID. */
async function createIdle(h: Harness, id: string): Promise<number> {
  await h.create(id);
  const m = await h.mustReach(id, MachineState.IDLE, 20_000);
  return Number(m.host!.ref.split("/")[1]);
}

/** The parameters of the requests `method path` (path a regex) the simulator saw. */
function sent(sim: Simulator, method: string, path: RegExp): Record<string, unknown>[] {
  return sim.requests.filter((q) => q.method === method && path.test(q.path))
    .map((q) => q.params ?? {});
}

const SMALL = { vcpu: 2, memory_mib: 2048 };

/** The built-in pve.small, for the backend in-process: the tests add the fields they try. */
const SMALL_TYPE: InstanceType = {
  name: "pve.small",
  vcpu: 2,
  memoryMib: 4096,
  template: DEFAULT_TEMPLATE,
};

Deno.test({
  ...T,
  name: "disk_gib: the clone's boot disk is grown to the type's size with PUT …/resize",
  async fn() {
    await withRig({}, async (r) => {
      await r.serve(
        { "pve.disk": { ...SMALL, disk_gib: 40 } },
        [["pve.disk", "pve1"]],
        async (h) => {
          const vmid = await createIdle(h, "pve-test/OnDemand/pve.disk/pve1/000");
          assert.match(String(r.sim.vm(vmid)!.config.scsi0), /^ceph-vm:vm-\d+-disk-0,size=40G$/);
          const resizes = sent(r.sim, "PUT", new RegExp(`/qemu/${vmid}/resize$`));
          assert.deepEqual(resizes.map((p) => [p.disk, p.size]), [["scsi0", "40G"]]);
          // The template keeps its own size.
          assert.match(String(r.sim.vm(9000)!.config.scsi0), /size=20G$/);
        },
      );
    });
  },
});

Deno.test({
  ...T,
  name:
    "storage: a full clone's disks go to the type's storage for the zone; others keep the template's",
  async fn() {
    await withRig({}, async (r) => {
      const catalog = { "pve.local": { ...SMALL, storage: { pve1: "local-lvm" } } };
      const slots: [string, string][] = [["pve.local", "pve1"], ["pve.local", "pve2"]];
      await r.serve(catalog, slots, async (h) => {
        const one = await createIdle(h, "pve-test/OnDemand/pve.local/pve1/000");
        const two = await createIdle(h, "pve-test/OnDemand/pve.local/pve2/000");
        const clones = sent(r.sim, "POST", /\/qemu\/9000\/clone$/);
        assert.deepEqual(
          clones.map((p) => [p.newid, p.storage, p.full]),
          [[one, "local-lvm", 1], [two, undefined, 1]],
        );
        assert.match(String(r.sim.vm(one)!.config.scsi0), /^local-lvm:vm-\d+-disk-0,/);
        assert.match(String(r.sim.vm(two)!.config.scsi0), /^ceph-vm:vm-\d+-disk-0,/);
      });
    });
  },
});

Deno.test({
  ...T,
  name: "clone linked: the clone shares the template's base disk; Delete frees only its own",
  async fn() {
    await withRig({}, async (r) => {
      const slots: [string, string][] = [["pve.linked", "pve1"]];
      await r.serve({ "pve.linked": { ...SMALL, clone: "linked" } }, slots, async (h) => {
        const id = "pve-test/OnDemand/pve.linked/pve1/000";
        const vmid = await createIdle(h, id);
        const clones = sent(r.sim, "POST", /\/qemu\/9000\/clone$/);
        assert.deepEqual(clones.map((p) => [p.full, p.storage]), [[0, undefined]]);
        const disk = String(r.sim.vm(vmid)!.config.scsi0);
        assert.match(disk, new RegExp(`^ceph-vm:base-9000-disk-0/vm-${vmid}-disk-0,`));
        await h.delete(id);
        await h.mustReach(id, MachineState.SPECULATIVE, 20_000);
        assert.equal(r.sim.vm(vmid), undefined);
        assert.equal(r.sim.vm(9000)!.config.scsi0, "ceph-vm:base-9000-disk-0,size=20G");
      });
    });
  },
});

Deno.test({
  ...T,
  name: "network: net0 goes on the type's bridge, VLAN and MTU, its model and MAC kept",
  async fn() {
    await withRig({ bridges: { vmbr0: 1500, vmbr1: 9000 } }, async (r) => {
      const catalog = { "pve.net": { ...SMALL, network: { bridge: "vmbr1", tag: 30, mtu: 9000 } } };
      let cloned = "";
      r.sim.faults.onRequest = (method, path) => {
        const m = /^\/nodes\/pve1\/qemu\/(\d+)\/config$/.exec(path);
        if (method === "PUT" && m && cloned === "") {
          cloned = String(r.sim.vm(Number(m[1]))!.config.net0);
        }
      };
      await r.serve(catalog, [["pve.net", "pve1"]], async (h) => {
        const vmid = await createIdle(h, "pve-test/OnDemand/pve.net/pve1/000");
        const mac = /^virtio=([0-9A-F:]{17}),bridge=vmbr0$/.exec(cloned)?.[1];
        assert.ok(mac !== undefined, `the clone's own NIC: ${cloned}`);
        assert.notEqual(mac, /virtio=([^,]+)/.exec(String(r.sim.vm(9000)!.config.net0))![1]);
        assert.equal(r.sim.vm(vmid)!.config.net0, `virtio=${mac},bridge=vmbr1,mtu=9000,tag=30`);
        assert.equal(r.sim.vm(vmid)!.status, "running");
      });
    });
  },
});

Deno.test({
  ...T,
  name: "--proxmox-vmid-range: clones take VMIDs in it, though nextid answers lower ones",
  async fn() {
    await withRig({}, async (r) => {
      const catalog = { "pve.s": SMALL };
      const slots: [string, string][] = [["pve.s", "pve1"], ["pve.s", "pve2"]];
      await r.serve(catalog, slots, async (h) => {
        const a = await createIdle(h, "pve-test/OnDemand/pve.s/pve1/000");
        const b = await createIdle(h, "pve-test/OnDemand/pve.s/pve2/000");
        assert.deepEqual([a, b], [20000, 20001]);
      }, ["--proxmox-vmid-range=20000-20009"]);
    });
  },
});

Deno.test({
  ...T,
  name: "--proxmox-vmid-range outside the datacenter's next-id range stops startup in one line",
  async fn() {
    await withRig({ datacenter: { nextId: { lower: 100, upper: 1000 } } }, async (r) => {
      const args = await r.args({ "pve.s": SMALL }, [["pve.s", "pve1"]], [
        "--proxmox-vmid-range=20000-20009",
      ]);
      const out = await runUntilExit(args, { timeoutMs: 30_000 });
      assert.equal(out.code, 1, out.stderr);
      const errors = out.stderr.split("\n").filter((l) => l.startsWith("error:"));
      assert.deepEqual(errors.length, 1, out.stderr);
      assert.match(
        errors[0],
        /--proxmox-vmid-range 20000-20009 lies outside the datacenter's next-id range 100-999: no VMID is left for clones; /,
      );
      assert.equal(sent(r.sim, "POST", /\/clone$/).length, 0);
    });
  },
});

Deno.test({
  ...T,
  name: "startup refuses, in one line each, what storage.cfg and the template can tell",
  async fn() {
    const storages = [
      { id: "local", type: "dir", content: "iso,vztmpl,backup" },
      { id: "local-lvm", type: "lvmthin" },
      { id: "ceph-vm", type: "rbd" },
      { id: "san", type: "lvm", shared: true },
      { id: "fast", type: "lvmthin", nodes: ["pve2"] },
    ];
    const templates = [
      { vmid: 9000, name: "shared", storage: "ceph-vm" },
      { vmid: 9100, name: "onsan", storage: "san" },
    ];
    await withRig({ storages, templates }, async (r) => {
      const cases: [Record<string, unknown>, string, RegExp][] = [
        [
          { disk_gib: 10 },
          "pve1",
          /template 9000's boot disk scsi0 is 20 GiB, larger than disk_gib 10 of pve\.t, and Proxmox never shrinks a disk; raise disk_gib to at least 20/,
        ],
        [{ storage: "nosuch" }, "pve1", /storage 'nosuch' is not in storage\.cfg, or the token/],
        [
          { storage: "local" },
          "pve1",
          /storage 'local' does not hold VM disks \(its content is iso,vztmpl,backup\)/,
        ],
        [
          { storage: "fast" },
          "pve1",
          /storage 'fast' is not available on pve1 .*where template 9000 is cloned/,
        ],
        [
          { storage: "local-lvm" },
          "pve2",
          /storage 'local-lvm' is not shared, and template 9000 on pve1 is cloned to pve2/,
        ],
        [
          { clone: "linked", template_vmid: 9100 },
          "pve1",
          /clone "linked" needs storage that can clone volumes: template 9100's scsi0 is on 'san' \(lvm\)/,
        ],
      ];
      for (const [fields, zone, want] of cases) {
        const args = await r.args({ "pve.t": { ...SMALL, ...fields } }, [["pve.t", zone]]);
        const out = await runUntilExit(args, { timeoutMs: 30_000 });
        assert.equal(out.code, 1, `${JSON.stringify(fields)}: ${out.stderr}`);
        const errors = out.stderr.split("\n").filter((l) => l.startsWith("error:"));
        assert.equal(errors.length, 1, out.stderr);
        assert.match(errors[0], new RegExp(`offering pve\\.t in zone ${zone}: `));
        assert.match(errors[0], want);
      }
      assert.equal(sent(r.sim, "POST", /\/clone$/).length, 0, "nothing was cloned");
    });
  },
});

Deno.test({
  ...T,
  name: "a clone refused for its storage or linked mode at Create names the type, zone and fix",
  async fn() {
    const storages = [{ id: "ceph-vm", type: "rbd" }, { id: "san", type: "lvm", shared: true }];
    await withRig({ storages }, async (r) => {
      await r.serve({ "pve.l": { ...SMALL, clone: "linked" } }, [["pve.l", "pve1"]], async (h) => {
        // The template's disk moved to storage that cannot link after the startup check.
        r.sim.editConfig(9000, { scsi0: "san:base-9000-disk-0,size=20G" });
        const id = "pve-test/OnDemand/pve.l/pve1/000";
        await h.create(id);
        const m = await h.mustReach(id, MachineState.FAILED, 20_000).catch(() => h.get(id));
        assert.equal(m.state, MachineState.FAILED);
        assert.match(
          m.last_error,
          /linked clone of template 9000 on pve1 for pve\.l in zone pve1 refused: Linked clone feature is not supported for drive 'scsi0'; use clone "full", or keep the template on storage that clones volumes/,
        );
        assert.deepEqual(r.sim.vms().filter((vm) => !vm.config.template), []);
      });
    });
  },
});

Deno.test({
  ...T,
  name: "a retry adopts the VM as it is: no second resize, NIC change or stop",
  async fn() {
    const type: InstanceType = { ...SMALL_TYPE, diskGib: 32, network: { bridge: "vmbr1", tag: 7 } };
    const catalog = new Map([["pve.small", type]]);
    await using r = await rig({ bridges: { vmbr0: 1500, vmbr1: 1500 } }, {}, {}, { catalog });
    const s = slot("pve1");
    const first = await r.backend.create(s, signal());
    const vmid = vmidOf(first.hostRef);
    const before = r.sim.requests.length;
    const again = await r.backend.create(s, signal());
    assert.equal(again.hostRef, first.hostRef);
    // Only the agent's ping, which the adopted VM is asked for again, may be a POST.
    const writes = r.sim.requests.slice(before)
      .filter((q) => q.method !== "GET" && !q.path.endsWith("/agent/ping"));
    assert.deepEqual(writes.map((q) => `${q.method} ${q.path}`), [], "nothing changed again");
    const vm = r.sim.vm(vmid)!;
    assert.match(String(vm.config.scsi0), /size=32G$/);
    assert.match(String(vm.config.net0), /,bridge=vmbr1,tag=7$/);
    assert.equal(vm.status, "running");
  },
});

Deno.test({
  ...T,
  name:
    "an adopted running VM short of the type: its disk grown live with no stop; a pending NIC stops and starts it once",
  async fn() {
    const type: InstanceType = { ...SMALL_TYPE, diskGib: 32, network: { bridge: "vmbr1" } };
    const catalog = new Map([["pve.small", type]]);
    await using r = await rig({ bridges: { vmbr0: 1500, vmbr1: 1500 } }, {}, {}, { catalog });
    const s = slot("pve1");
    const vmid = vmidOf((await r.backend.create(s, signal())).hostRef);
    const powered = (from: number) =>
      r.sim.requests.slice(from).filter((q) => /\/status\/(start|stop)$/.test(q.path))
        .map((q) => q.path.split("/").at(-1));
    // As if the disk had not been grown yet: the retry grows it, the VM keeps running.
    r.sim.editConfig(vmid, { scsi0: `ceph-vm:vm-${vmid}-disk-0,size=20G` });
    let before = r.sim.requests.length;
    await r.backend.create(s, signal());
    assert.match(String(r.sim.vm(vmid)!.config.scsi0), /size=32G$/);
    assert.deepEqual(powered(before), [], "a disk is grown on the running VM");
    // A NIC not yet on the type's bridge: a running VM holds the change pending until it starts.
    const mac = /virtio=([^,]+)/.exec(String(r.sim.vm(vmid)!.config.net0))![1];
    r.sim.editConfig(vmid, { net0: `virtio=${mac},bridge=vmbr0` });
    before = r.sim.requests.length;
    await r.backend.create(s, signal());
    assert.deepEqual(powered(before), ["stop", "start"]);
    assert.equal(r.sim.vm(vmid)!.config.net0, `virtio=${mac},bridge=vmbr1`);
    assert.equal(r.sim.vm(vmid)!.status, "running");
  },
});

Deno.test({
  ...T,
  name: "--proxmox-vmid-range used up: Create fails naming both ranges and what to widen",
  async fn() {
    await using r = await rig({}, { vmidRange: { lower: 20000, upper: 20001 } });
    await r.backend.create(slot("pve1"), signal());
    const err = await r.backend.create(slot("pve1"), signal()).then(() => null, (e) => e);
    assert.match(
      String(err),
      /no free VMID in \[20000, 20001\), where the datacenter's next-id range 100-999999 and --proxmox-vmid-range 20000-20000 meet, beyond the 0 this provider is cloning into; widen --proxmox-vmid-range or the next-id range/,
    );
    assert.equal(r.sim.vms().filter((vm) => !vm.config.template).length, 1);
  },
});
