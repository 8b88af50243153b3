// Template sources from flags and catalog files, and the startup refusal of
// an offering whose zone has no template.

import assert from "node:assert/strict";
import { parseCatalog } from "../../src/config/catalog.ts";
import { loadConfig } from "../../src/config/load.ts";
import { ConfigError, type TemplateSource } from "../../src/config/types.ts";

const CERT =
  "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ0VSVA==\n-----END CERTIFICATE-----\n";
const REAL = [
  "--proxmox-api-url=https://pve1.example:8006/api2/json",
  "--proxmox-token-id=bigfleet@pve!autoscaler",
  "--proxmox-token-secret=5e3c1f0a-aaaa-bbbb-cccc-0123456789ab",
  "--proxmox-ca-file=/ca.pem",
  "--nodes=pve1,pve2",
];

/** loadConfig with in-memory files. */
function load(argv: string[], files: Record<string, string> = {}) {
  const all = new Map(Object.entries({ "/ca.pem": CERT, ...files }));
  return loadConfig(argv, {
    readFile: (p) => {
      const text = all.get(p);
      return text === undefined
        ? Promise.reject(new Deno.errors.NotFound(p))
        : Promise.resolve(text);
    },
  });
}

async function rejects(argv: string[], re: RegExp, files: Record<string, string> = {}) {
  await assert.rejects(load(argv, files), (e: unknown) => {
    assert.ok(e instanceof ConfigError, `not a ConfigError: ${e}`);
    assert.match(e.message, re);
    assert.ok(!e.message.includes("\n"));
    return true;
  });
}

const perZone = (pairs: [string, number][]): TemplateSource => ({
  kind: "per-zone",
  vmids: new Map(pairs),
});

Deno.test("templates: --template-vmid takes one VMID or zone=VMID pairs; --template-name a name", async () => {
  assert.deepEqual((await load(REAL)).template, { kind: "vmid", vmid: 9000 });
  const pairs = await load([...REAL, "--template-vmid=pve1=9000, pve2=9001"]);
  assert.deepEqual(pairs.template, perZone([["pve1", 9000], ["pve2", 9001]]));
  assert.ok([...pairs.catalog.values()].every((t) => t.template === pairs.template));
  const named = await load([...REAL, "--template-name=k8s-golden.lab"]);
  assert.deepEqual(named.template, { kind: "name", name: "k8s-golden.lab" });
});

Deno.test("templates: bad flags name the flag", async () => {
  await rejects([...REAL, "--template-vmid=pve1=9000,pve2"], /^--template-vmid: want zone=VMID/);
  await rejects([...REAL, "--template-vmid=pve1=90"], /^--template-vmid: .*100-999999999/);
  await rejects([...REAL, "--template-vmid=pve1=x"], /^--template-vmid: .*want an integer VMID/);
  await rejects([...REAL, "--template-vmid=pve1=9000,pve1=9001"], /pve1" listed twice/);
  await rejects([...REAL, "--template-vmid==9000"], /^--template-vmid: .*zone is empty/);
  await rejects([...REAL, "--template-name=bad name"], /^--template-name: .*not a Proxmox VM name/);
  await rejects(
    [...REAL, "--template-name=t", "--template-vmid=9001"],
    /^set either --template-vmid or --template-name, not both$/,
  );
});

Deno.test("templates: the built-in offerings need a template in each of their zones", async () => {
  await rejects(
    [...REAL, "--template-vmid=pve1=9000"],
    /^--template-vmid: "pve\.large" has no template for zone "pve2" \(pve1=9000\)/,
  );
  await rejects(
    [...REAL, "--template-vmid=pve1=9000,pve2=9001,pve3=9002"],
    /^--template-vmid: .*zone "pve3", which is not one of --nodes \(pve1,pve2\)/,
  );
  // The fake backend never clones: no zone check there.
  const fake = await load(["--use-fake-backend", "--template-vmid=pve1=9000"]);
  assert.equal(fake.slots.length, 32);
});

Deno.test("templates: catalog entries take a VMID, a per-zone map or a name", () => {
  const c = parseCatalog(
    JSON.stringify({
      "a": { vcpu: 1, memory_mib: 1024, template_vmid: { pve1: 9000, pve2: 9001 } },
      "b": { vcpu: 1, memory_mib: 1024, template_name: "golden" },
      "c": { vcpu: 1, memory_mib: 1024, template_vmid: 9005, template_name: "" },
      "d": { vcpu: 1, memory_mib: 1024, template_vmid: null },
    }),
    { kind: "name", name: "default" },
  );
  assert.deepEqual(c.get("a")!.template, perZone([["pve1", 9000], ["pve2", 9001]]));
  assert.deepEqual(c.get("b")!.template, { kind: "name", name: "golden" });
  assert.deepEqual(c.get("c")!.template, { kind: "vmid", vmid: 9005 });
  assert.deepEqual(c.get("d")!.template, { kind: "name", name: "default" });
  const bad: [unknown, RegExp][] = [
    [
      { template_vmid: 9000, template_name: "x" },
      /"a": set template_vmid or template_name, not both/,
    ],
    [{ template_vmid: {} }, /"a": template_vmid names no zone/],
    [{ template_vmid: { pve1: 5 } }, /template_vmid of zone "pve1" must be 100-999999999/],
    [{ template_vmid: { "a/b": 9000 } }, /zone "a\/b" must not contain/],
    [{ template_vmid: "9000" }, /template_vmid must be a number, got a string/],
    [{ template_name: 7 }, /template_name must be a string/],
    [
      { template_name: "no_underscores" },
      /template_name "no_underscores" is not a Proxmox VM name/,
    ],
  ];
  for (const [extra, re] of bad) {
    const text = JSON.stringify({ a: { vcpu: 1, memory_mib: 1024, ...(extra as object) } });
    assert.throws(() => parseCatalog(text, { kind: "vmid", vmid: 9000 }), re, text);
  }
});

Deno.test("templates: an offering whose zone has no template in the catalog is refused", async () => {
  const files = {
    "/types.json": JSON.stringify({
      "t.one": { vcpu: 2, memory_mib: 2048, template_vmid: { pve1: 9000 } },
      "t.two": { vcpu: 2, memory_mib: 2048 },
    }),
    "/offers.json": JSON.stringify([
      { instance_type: "t.one", zone: "pve1", count: 1 },
      { instance_type: "t.two", zone: "pve2", count: 1 },
      { instance_type: "t.one", zone: "pve2", count: 1 },
    ]),
  };
  const flags = ["--instance-types=/types.json", "--offerings=/offers.json"];
  await rejects(
    [...REAL, ...flags],
    /^--offerings: offering 2: "t\.one" has no template for zone "pve2" \(pve1=9000\)$/,
    files,
  );
  const ok = await load([...REAL, ...flags], {
    ...files,
    "/offers.json": JSON.stringify([{ instance_type: "t.one", zone: "pve1", count: 2 }]),
  });
  assert.equal(ok.slots.length, 2);
});
