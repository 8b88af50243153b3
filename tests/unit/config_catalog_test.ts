import assert from "node:assert/strict";
import {
  allocatableOf,
  builtinCatalog,
  parseCatalog,
  sortedNames,
} from "../../src/config/catalog.ts";

const T9000 = { kind: "vmid", vmid: 9000 } as const;

Deno.test("catalog: built-in sizes clone the default template", () => {
  const template = { kind: "vmid", vmid: 9100 } as const;
  const c = builtinCatalog(template);
  assert.deepEqual([...c.values()], [
    { name: "pve.small", vcpu: 2, memoryMib: 4096, template },
    { name: "pve.medium", vcpu: 4, memoryMib: 8192, template },
    { name: "pve.large", vcpu: 8, memoryMib: 16384, template },
    { name: "pve.xlarge", vcpu: 16, memoryMib: 32768, template },
  ]);
  assert.deepEqual(sortedNames(c), ["pve.large", "pve.medium", "pve.small", "pve.xlarge"]);
});

Deno.test("catalog: allocatable is whole GiB as Gi, else Mi", () => {
  const it = { name: "x", vcpu: 8, memoryMib: 16384, template: T9000 };
  assert.deepEqual(allocatableOf(it), [["cpu", "8"], ["memory", "16Gi"]]);
  assert.deepEqual(allocatableOf({ ...it, vcpu: 3, memoryMib: 1536 }), [["cpu", "3"], [
    "memory",
    "1536Mi",
  ]]);
});

Deno.test("catalog: file entries, order kept, template 0/absent takes the default", () => {
  const c = parseCatalog(
    JSON.stringify({
      "z.big": { vcpu: 32, memory_mib: 65536, template_vmid: 9001 },
      "a.tiny": { vcpu: 1, memory_mib: 512, template_vmid: 0 },
      "m.mid": { vcpu: 2, memory_mib: 2048 },
    }),
    T9000,
  );
  assert.deepEqual([...c.keys()], ["z.big", "a.tiny", "m.mid"]);
  assert.deepEqual(c.get("z.big")!.template, { kind: "vmid", vmid: 9001 });
  assert.equal(c.get("a.tiny")!.template, T9000);
  assert.equal(c.get("m.mid")!.template, T9000);
  assert.deepEqual(sortedNames(c), ["a.tiny", "m.mid", "z.big"]);
});

Deno.test("catalog: a __proto__ type name is just a name", () => {
  const c = parseCatalog('{"__proto__": {"vcpu": 1, "memory_mib": 1024}}', T9000);
  assert.deepEqual([...c.keys()], ["__proto__"]);
});

Deno.test("catalog: invalid files are rejected", () => {
  const bad: [string, RegExp][] = [
    ["[]", /want an object/],
    ["{}", /no instance types/],
    ["{", /end of JSON|expected/],
    ['{"a": 1}', /want an object/],
    ['{"a": {"memory_mib": 1024}}', /vcpu is required/],
    ['{"a": {"vcpu": 0, "memory_mib": 1024}}', /vcpu must be a positive integer/],
    ['{"a": {"vcpu": -2, "memory_mib": 1024}}', /vcpu must be a positive integer/],
    ['{"a": {"vcpu": 1.5, "memory_mib": 1024}}', /vcpu must be a positive integer/],
    ['{"a": {"vcpu": "2", "memory_mib": 1024}}', /vcpu must be a number/],
    ['{"a": {"vcpu": 2, "memory_mib": 0}}', /memory_mib must be a positive integer/],
    ['{"a": {"vcpu": 2, "memory_mib": -1}}', /memory_mib must be a positive integer/],
    ['{"a": {"vcpu": 2, "memory_mib": 1024, "template_vmid": -5}}', /template_vmid/],
    ['{"a": {"vcpu": 2, "memory_mib": 1024, "template_vmid": 50}}', /template_vmid must be 100/],
    ['{"a/b": {"vcpu": 2, "memory_mib": 1024}}', /must not contain "\/"/],
    ['{"": {"vcpu": 2, "memory_mib": 1024}}', /name is empty/],
    ['{"a": {"vcpu": 2, "memory_mib": 1}, "a": {"vcpu": 2, "memory_mib": 1}}', /duplicate key/],
    [
      '{"a": {"vcpu": 2, "memroy_mib": 1024}}',
      /instance type "a": unknown field "memroy_mib" \(did you mean "memory_mib"\?\)$/,
    ],
    [
      "name: x",
      /expected a JSON value \(an object, array, string, number, true, false or null\) but found "name:" at line 1 column 1$/,
    ],
  ];
  for (const [text, re] of bad) assert.throws(() => parseCatalog(text, T9000), re, text);
});

Deno.test("catalog: disk_gib, storage, clone and network are read only when set", () => {
  const c = parseCatalog(
    JSON.stringify({
      plain: { vcpu: 1, memory_mib: 1024 },
      full: {
        vcpu: 2,
        memory_mib: 2048,
        disk_gib: 40,
        storage: "local-lvm",
        clone: "full",
        network: { bridge: "vmbr1", tag: 30, mtu: 9000 },
      },
      zoned: { vcpu: 2, memory_mib: 2048, storage: { pve1: "local-lvm", pve2: "fast.ssd" } },
      linked: { vcpu: 2, memory_mib: 2048, clone: "linked", network: { bridge: "vnet1" } },
    }),
    T9000,
  );
  assert.deepEqual(c.get("plain"), { name: "plain", vcpu: 1, memoryMib: 1024, template: T9000 });
  const full = c.get("full")!;
  assert.equal(full.diskGib, 40);
  assert.deepEqual(full.storage, { kind: "one", storage: "local-lvm" });
  assert.equal(full.clone, "full");
  assert.deepEqual(full.network, { bridge: "vmbr1", tag: 30, mtu: 9000 });
  assert.deepEqual(c.get("zoned")!.storage, {
    kind: "per-zone",
    storages: new Map([["pve1", "local-lvm"], ["pve2", "fast.ssd"]]),
  });
  assert.equal(c.get("linked")!.clone, "linked");
  assert.deepEqual(c.get("linked")!.network, { bridge: "vnet1" });
});

Deno.test("catalog: a bad disk_gib, storage, clone or network is one line naming the entry and field", () => {
  const entry = (extra: string) => `{"t": {"vcpu": 2, "memory_mib": 1024, ${extra}}}`;
  const bad: [string, RegExp][] = [
    ['"disk_gib": 0', /instance type "t": disk_gib must be a positive integer, got 0$/],
    ['"disk_gib": "40G"', /instance type "t": disk_gib must be a number, got a string$/],
    ['"storage": 7', /instance type "t": storage must be a string, got a number$/],
    [
      '"storage": "local lvm"',
      /instance type "t": storage "local lvm" is not a Proxmox storage id$/,
    ],
    ['"storage": {}', /instance type "t": storage names no zone$/],
    [
      '"storage": {"pve1": "-x"}',
      /instance type "t": storage of zone "pve1" "-x" is not a Proxmox storage id$/,
    ],
    ['"clone": "thin"', /instance type "t": clone must be "full" or "linked", got "thin"$/],
    ['"clone": true', /instance type "t": clone must be "full" or "linked", got a boolean$/],
    [
      '"clone": "linked", "storage": "local-lvm"',
      /instance type "t": storage cannot be set with clone "linked" .*; drop one$/,
    ],
    ['"network": "vmbr0"', /instance type "t": network: want an object, got a string$/],
    ['"network": {"tag": 5}', /instance type "t": network\.bridge is required$/],
    [
      '"network": {"bridge": "vm br"}',
      /instance type "t": network\.bridge "vm br" is not a bridge name$/,
    ],
    [
      '"network": {"bridge": "vmbr0", "tag": 4095}',
      /instance type "t": network\.tag must be a VLAN id 1-4094, got 4095$/,
    ],
    [
      '"network": {"bridge": "vmbr0", "mtu": 100}',
      /instance type "t": network\.mtu must be 576-65520 \(or 1: the bridge's\), got 100$/,
    ],
    [
      '"network": {"bridge": "vmbr0", "vlan": 5}',
      /instance type "t": network: unknown field "vlan" \(known: bridge, tag, mtu\)$/,
    ],
    ['"disk": 40', /instance type "t": unknown field "disk" \(did you mean "disk_gib"\?\)$/],
  ];
  for (const [extra, re] of bad) {
    assert.throws(() => parseCatalog(entry(extra), T9000), re, extra);
  }
});
