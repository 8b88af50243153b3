// Where clones come from on a real cluster: a template per node on local
// storage, templates found by name, one template on shared storage for every
// zone, and the startup refusal of a zone its template cannot reach.

import assert from "node:assert/strict";
import type { Offering } from "../../src/config/offerings.ts";
import type { InstanceType, TemplateSource } from "../../src/config/types.ts";
import { BackendError } from "../../src/kit/backend.ts";
import { Harness, MachineState, runUntilExit, startProvider } from "../harness/mod.ts";
import { startSimulator } from "../pvesim/mod.ts";
import type { SimTemplate, Simulator } from "../pvesim/mod.ts";
import { logLines, rig, signal, slot, vmidOf } from "./helpers.ts";

const T = { sanitizeOps: false, sanitizeResources: false };

function catalogOf(template: TemplateSource): Map<string, InstanceType> {
  return new Map([["pve.small", { name: "pve.small", vcpu: 2, memoryMib: 4096, template }]]);
}

/** One offering of a pve.small slot per zone. */
function offeringsIn(...zones: string[]): Offering[] {
  return zones.map((zone) => ({
    instanceType: "pve.small",
    zone,
    count: 1,
    resources: [],
    labels: [],
  }));
}

const perNode: TemplateSource = {
  kind: "per-zone",
  vmids: new Map([["pve1", 9000], ["pve2", 9001]]),
};
const localPair: SimTemplate[] = [
  { vmid: 9000, node: "pve1", name: "k8s-golden", sharedStorage: false },
  { vmid: 9001, node: "pve2", name: "k8s-golden", sharedStorage: false },
];

/** Provider flags for a process against `sim`, its token secret in `dir`/token. */
function providerArgs(sim: Simulator, dir: string, ...extra: string[]): string[] {
  return [
    "--provider=pve-test",
    `--proxmox-api-url=${sim.url}`,
    `--proxmox-token-id=${sim.tokenId}`,
    `--proxmox-token-file=${dir}/token`,
    `--proxmox-ca-file=${sim.caFile}`,
    "--nodes=pve1,pve2",
    "--proxmox-pool=bigfleet",
    "--seed-count=8",
    "--metrics-addr=",
    ...extra,
  ];
}

const clonePosts = (r: { sim: Simulator }) =>
  r.sim.requests.filter((q) => q.method === "POST" && q.path.endsWith("/clone"));

Deno.test("per-node templates on local storage: each zone clones its own, without target", async () => {
  await using r = await rig({ templates: localPair }, {}, {}, { catalog: catalogOf(perNode) });
  const a = await r.backend.create(slot("pve1"), signal());
  const b = await r.backend.create(slot("pve2"), signal());
  assert.equal(r.sim.vm(vmidOf(a.hostRef))!.node, "pve1");
  assert.equal(r.sim.vm(vmidOf(b.hostRef))!.node, "pve2");
  assert.deepEqual(
    clonePosts(r).map((q) => [q.path, q.status, q.params?.target]),
    [
      ["/nodes/pve1/qemu/9000/clone", 200, undefined],
      ["/nodes/pve2/qemu/9001/clone", 200, undefined],
    ],
  );
});

Deno.test("templates found by name: the template of that name on the zone's node", async () => {
  await using r = await rig(
    {
      templates: [
        { vmid: 9100, node: "pve1", name: "k8s-golden", sharedStorage: false },
        { vmid: 9200, node: "pve2", name: "k8s-golden", sharedStorage: false },
        // Same name, but not a template: never a clone source.
        { vmid: 9300, node: "pve2", name: "k8s-golden", template: false },
        { vmid: 9400, node: "pve2", name: "other", sharedStorage: false },
      ],
    },
    {},
    {},
    { catalog: catalogOf({ kind: "name", name: "k8s-golden" }) },
  );
  const b = await r.backend.create(slot("pve2"), signal());
  assert.equal(r.sim.vm(vmidOf(b.hostRef))!.node, "pve2");
  assert.deepEqual(clonePosts(r).map((q) => q.path), ["/nodes/pve2/qemu/9200/clone"]);
  await r.backend.create(slot("pve1"), signal());
  assert.equal(clonePosts(r).at(-1)!.path, "/nodes/pve1/qemu/9100/clone");
});

Deno.test("one template on shared storage serves every zone through target", async () => {
  await using r = await rig();
  const { hostRef } = await r.backend.create(slot("pve2"), signal());
  assert.equal(r.sim.vm(vmidOf(hostRef))!.node, "pve2");
  const post = clonePosts(r)[0];
  assert.equal(post.path, "/nodes/pve1/qemu/9000/clone");
  assert.equal(post.params?.target, "pve2");
});

Deno.test("startup: a zone its template cannot be cloned to is refused, naming offering, zone and storage", async () => {
  const cases: [SimTemplate[], RegExp][] = [
    // The common small cluster: one template on local-lvm, offerings in two zones.
    [
      [{ vmid: 9000, node: "pve1", name: "t", sharedStorage: false }],
      /pve\.small.*pve2.*9000.*pve1.*scsi0.*'local-lvm'.*not shared/,
    ],
    // Shared disk, but an installer ISO left in the CD-ROM on `local`.
    [
      [{ vmid: 9000, node: "pve1", name: "t", config: { ide2: "local:iso/x.iso,media=cdrom" } }],
      /pve\.small.*pve2.*ide2.*'local'.*not shared/,
    ],
    // A cloud-init drive on local-lvm.
    [
      [{ vmid: 9000, node: "pve1", name: "t", config: { ide2: "local-lvm:vm-9000-cloudinit" } }],
      /pve\.small.*pve2.*ide2.*'local-lvm'/,
    ],
  ];
  for (const [templates, want] of cases) {
    const err = await rig({ templates }, {}, {}, {
      catalog: catalogOf({ kind: "vmid", vmid: 9000 }),
      offerings: offeringsIn("pve1", "pve2"),
    }).then(
      async (r) => {
        await r[Symbol.asyncDispose]();
        return null;
      },
      (e) => e,
    );
    assert.ok(err instanceof BackendError, `must refuse to start: ${String(err)}`);
    assert.match(err.message, want);
    assert.ok(!err.message.includes("\n"), "one line");
  }
});

Deno.test("startup: per-node and shared layouts pass; a missing per-node template is refused", async () => {
  {
    await using _ = await rig({ templates: localPair }, {}, {}, {
      catalog: catalogOf(perNode),
      offerings: offeringsIn("pve1", "pve2"),
    });
  }
  {
    await using _ = await rig({}, {}, {}, {
      catalog: catalogOf({ kind: "vmid", vmid: 9000 }),
      offerings: offeringsIn("pve1", "pve2"),
    });
  }
  await assert.rejects(
    rig({ templates: [localPair[0]] }, {}, {}, {
      catalog: catalogOf({ kind: "name", name: "k8s-golden" }),
      offerings: offeringsIn("pve1", "pve2"),
    }),
    (e) =>
      e instanceof BackendError &&
      /pve\.small.*pve2.*no template named "k8s-golden"/.test(e.message),
  );
  await assert.rejects(
    rig({ templates: [localPair[0]] }, {}, {}, {
      catalog: catalogOf(perNode),
      offerings: offeringsIn("pve1", "pve2"),
    }),
    (e) =>
      e instanceof BackendError && /pve\.small.*pve2.*template VM 9001 not found/.test(e.message),
  );
});

Deno.test("startup: a storage the token cannot see is named with the privilege to grant", async () => {
  const err = await rig({ templates: [{ vmid: 9000, node: "pve1", name: "t" }] }, {}, {}, {
    catalog: catalogOf({ kind: "vmid", vmid: 9000 }),
    offerings: offeringsIn("pve2"),
  }, (s) => void (s.faults.hiddenStorages = ["ceph-vm"])).then(
    async (r) => {
      await r[Symbol.asyncDispose]();
      return null;
    },
    (e) => e,
  );
  assert.ok(err instanceof BackendError, String(err));
  assert.match(err.message, /pve2.*'ceph-vm'.*Datastore\.Audit/);
});

Deno.test("startup: an unreachable template node is logged, not fatal; Create still resolves it", async () => {
  await using r = await rig({ templates: localPair }, {}, {}, {
    catalog: catalogOf(perNode),
    offerings: offeringsIn("pve1", "pve2"),
  }, (s) => {
    s.faults.http596.push({
      path: "/nodes/pve2/qemu/9001/config",
      method: "GET",
      count: 30,
      status: 595,
      reason: "No route to host",
    });
  });
  assert.ok(
    logLines.some((l) => /could not check the template of pve\.small in zone pve2/.test(l)),
    "warned",
  );
  r.sim.faults.http596 = [];
  const { hostRef } = await r.backend.create(slot("pve2"), signal());
  assert.equal(r.sim.vm(vmidOf(hostRef))!.node, "pve2");
});

Deno.test({
  ...T,
  name: "startup (process): one error line, exit 1, nothing served, no FAILED machines",
  async fn() {
    const sim = await startSimulator({
      templates: [{ vmid: 9000, node: "pve1", name: "t", sharedStorage: false }],
    });
    const dir = await Deno.makeTempDir({ prefix: "bf-pve-tmpl-" });
    try {
      await Deno.writeTextFile(`${dir}/token`, sim.tokenSecret);
      const out = await runUntilExit(providerArgs(sim, dir), { timeoutMs: 30_000 });
      assert.equal(out.code, 1, out.stderr);
      const errors = out.stderr.split("\n").filter((l) => l.startsWith("error:"));
      assert.equal(errors.length, 1, out.stderr);
      assert.match(errors[0], /offering pve\.(large|xlarge) in zone pve2.*'local-lvm'/);
      assert.equal(sim.requests.filter((q) => q.path.endsWith("/clone")).length, 0);
    } finally {
      await sim.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  ...T,
  name: "flags: --template-vmid per node and --template-name serve machines in every zone",
  async fn() {
    const sim = await startSimulator({ templates: localPair });
    const dir = await Deno.makeTempDir({ prefix: "bf-pve-tmpl-" });
    try {
      await Deno.writeTextFile(`${dir}/token`, sim.tokenSecret);
      const flags = ["--template-vmid=pve1=9000,pve2=9001", "--template-name=k8s-golden"];
      for (const [n, flag] of flags.entries()) {
        const before = sim.requests.length;
        const p = await startProvider({ args: providerArgs(sim, dir, flag) });
        const h = new Harness(p.addr);
        try {
          // A fresh machine each time: the first run's VM is found again at boot.
          const id = `pve-test/OnDemand/pve.xlarge/pve2/00${n}`;
          await h.create(id);
          const m = await h.mustReach(id, MachineState.IDLE, 20_000);
          assert.match(m.host?.ref ?? "", /^pve2\/\d+$/, flag);
          const posts = sim.requests.slice(before)
            .filter((q) => q.method === "POST" && q.path.endsWith("/clone"));
          assert.deepEqual(posts.map((q) => q.path), ["/nodes/pve2/qemu/9001/clone"], flag);
        } finally {
          h.close();
          await p.stop();
        }
      }
    } finally {
      await sim.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
