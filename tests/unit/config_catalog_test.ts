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
