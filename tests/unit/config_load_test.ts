import assert from "node:assert/strict";
import { loadConfig } from "../../src/config/load.ts";
import { ConfigError } from "../../src/config/types.ts";
import { DEFAULT_TIMEOUTS } from "../../src/kit/timeouts.ts";

const FAKE = ["--use-fake-backend"];

/** Assert loadConfig rejects argv with a one-line ConfigError matching `re`. */
async function rejects(argv: string[], re: RegExp): Promise<void> {
  await assert.rejects(loadConfig(argv), (e: unknown) => {
    assert.ok(e instanceof ConfigError, `not a ConfigError: ${e}`);
    assert.match(e.message, re);
    assert.ok(!e.message.includes("\n"), "message spans lines");
    return true;
  });
}

Deno.test("load: fake defaults", async () => {
  const c = await loadConfig(FAKE);
  assert.equal(c.backend, "fake");
  assert.equal(c.proxmox, null);
  assert.deepEqual(c.addr, { host: "", port: 9000, raw: ":9000" });
  assert.deepEqual(c.metricsAddr, { host: "", port: 9090, raw: ":9090" });
  assert.equal(c.provider, "proxmox");
  assert.equal(c.fakeDelayMs, 0);
  assert.equal(c.reconcileIntervalMs, 120_000);
  assert.deepEqual(c.template, { kind: "vmid", vmid: 9000 });
  assert.equal(c.bootstrapPath, "/run/bigfleet-bootstrap");
  assert.deepEqual(c.bootstrapExec, ["/bin/sh"]);
  assert.equal(c.statePath, "");
  assert.equal(c.reflection, true);
  assert.equal(c.tls, null);
  assert.equal(c.offeringsSource, "built-in");
  assert.deepEqual(c.zones, ["pve-a", "pve-b"]);
  assert.deepEqual([...c.catalog.keys()], ["pve.small", "pve.medium", "pve.large", "pve.xlarge"]);
  assert.equal(c.slots.length, 32);
  assert.equal(c.slots[0].id, "proxmox/OnDemand/pve.large/pve-a/000");
});

Deno.test("load: slots are made from the offerings on each read, so the config holds none", async () => {
  const c = await loadConfig([...FAKE, "--seed-count=20"]);
  const first = c.slots;
  const second = c.slots;
  assert.notEqual(first, second, "a new list per read: nothing keeps the last one");
  assert.deepEqual(first, second);
  assert.equal(first.length, 20);
});

Deno.test("load: certification-runner style argv", async () => {
  const c = await loadConfig([
    "--addr=127.0.0.1:0",
    "--provider=certify",
    "--seed-count=64",
    "--state=/tmp/x.kv",
    "--use-fake-backend",
    "-metrics-addr",
    "",
    "-fake-delay",
    "1.5s",
    "--reflection=false",
  ]);
  assert.deepEqual(c.addr, { host: "127.0.0.1", port: 0, raw: "127.0.0.1:0" });
  assert.equal(c.metricsAddr, null);
  assert.equal(c.slots.length, 64);
  assert.equal(c.slots[0].id, "certify/OnDemand/pve.large/pve-a/000");
  assert.equal(c.statePath, "/tmp/x.kv");
  assert.equal(c.fakeDelayMs, 1500);
  assert.equal(c.reflection, false);
});

Deno.test("load: seed count splits and default zone", async () => {
  const count = async (argv: string[]) => {
    const c = await loadConfig([...FAKE, ...argv]);
    const per = new Map<string, number>();
    for (const s of c.slots) {
      per.set(`${s.instanceType}@${s.zone}`, (per.get(`${s.instanceType}@${s.zone}`) ?? 0) + 1);
    }
    return [...per];
  };
  assert.deepEqual(await count(["--seed-count=10", "--default-zone=lab"]), [
    ["pve.large@lab-a", 3],
    ["pve.large@lab-b", 3],
    ["pve.xlarge@lab-a", 2],
    ["pve.xlarge@lab-b", 2],
  ]);
  assert.deepEqual(await count(["--seed-count=2"]), [["pve.large@pve-a", 1], [
    "pve.large@pve-b",
    1,
  ]]);
  assert.deepEqual(await count(["--seed-count=0"]), []);
});

Deno.test("load: other values", async () => {
  const c = await loadConfig([
    ...FAKE,
    "--bootstrap-exec=/bin/bash,-e",
    "--bootstrap-path=/tmp/b",
    "--reconcile-interval=0",
    "--template-vmid=123",
    "--prices=pve.large=1.25",
    "--price-per-vcpu-hour=0.01",
    "--price-per-gib-hour=0",
    "--addr=[::1]:7000",
  ]);
  assert.deepEqual(c.bootstrapExec, ["/bin/bash", "-e"]);
  assert.equal(c.bootstrapPath, "/tmp/b");
  assert.equal(c.reconcileIntervalMs, 0);
  assert.deepEqual(c.template, { kind: "vmid", vmid: 123 });
  assert.ok([...c.catalog.values()].every((t) => t.template === c.template));
  assert.equal(c.slots.find((s) => s.instanceType === "pve.large")!.pricePerHour, 1.25);
  assert.equal(c.slots.find((s) => s.instanceType === "pve.xlarge")!.pricePerHour, 0.16);
  assert.equal(c.addr.host, "::1");
});

Deno.test("load: the readiness gate is on with the built-in check unless told otherwise", async () => {
  assert.deepEqual((await loadConfig(FAKE)).readyGate, { exec: null, timeoutMs: 0 });
  const custom = await loadConfig([
    ...FAKE,
    "--ready-exec=/usr/local/bin/ready,-q",
    "--ready-timeout=2m",
  ]);
  assert.deepEqual(custom.readyGate, { exec: ["/usr/local/bin/ready", "-q"], timeoutMs: 120_000 });
  assert.equal((await loadConfig([...FAKE, "--ready-gate=false"])).readyGate, null);
});

Deno.test("load: bad values name their flag", async () => {
  const cases: [string[], RegExp][] = [
    [["--addr=9000"], /^--addr: missing port/],
    [["--addr=:70000"], /^--addr: port/],
    [["--metrics-addr=nope"], /^--metrics-addr: /],
    [["--fake-delay=soon"], /^--fake-delay: invalid duration/],
    [["--reconcile-interval=5"], /^--reconcile-interval: .*missing unit/],
    [["--reconcile-interval=-1m"], /^--reconcile-interval: negative/],
    [["--reconcile-interval=1000h"], /^--reconcile-interval: .*timer limit/],
    [["--seed-count=-1"], /^--seed-count: must be >= 0/],
    [["--seed-count=1.5"], /^--seed-count: want an integer/],
    [["--seed-count=abc"], /^--seed-count: want an integer/],
    [["--seed-count="], /^--seed-count: want an integer/],
    [["--template-vmid=0"], /^--template-vmid: /],
    [["--template-vmid=x"], /^--template-vmid: want an integer/],
    [["--prices=pve.large"], /^--prices: want type=usd/],
    [["--prices=pve.large=-1"], /^--prices: .*negative/],
    [["--price-per-vcpu-hour=-0.1"], /^--price-per-vcpu-hour: .*negative/],
    [["--price-per-gib-hour=NaN"], /^--price-per-gib-hour: invalid price/],
    [["--bootstrap-exec="], /^--bootstrap-exec: is empty/],
    [["--bootstrap-exec=/bin/sh,,x"], /^--bootstrap-exec: empty element/],
    [["--bootstrap-path="], /^--bootstrap-path: is empty/],
    [["--ready-exec=/bin/sh,,x"], /^--ready-exec: empty element/],
    [["--ready-gate=false", "--ready-exec=/bin/true"], /^--ready-exec: .*--ready-gate=false/],
    [["--ready-timeout=5"], /^--ready-timeout: .*missing unit/],
    [["--ready-gate=maybe"], /^--ready-gate: invalid boolean/],
    [["--provider="], /^--provider: is empty/],
    [["--provider=a/b"], /^--provider: .*"\/"/],
    [["--default-zone="], /^--default-zone: is empty/],
    [["--proxmox-backend=cloud"], /^--proxmox-backend: want proxmox, fake or auto/],
    [["--use-fake-backend=yes"], /^--use-fake-backend: invalid boolean/],
    [["--bogus"], /^unknown flag --bogus$/],
  ];
  for (const [argv, re] of cases) await rejects([...FAKE, ...argv], re);
});

Deno.test("load: fail closed without an API and without the fake", async () => {
  await rejects([], /^no Proxmox API configured: set --proxmox-api-url .* --use-fake-backend/);
  await rejects(["--proxmox-backend=auto"], /no Proxmox API configured/);
  await rejects(["--use-fake-backend=false"], /no Proxmox API configured/);
});

Deno.test("load: --proxmox-backend=fake selects the fake without --use-fake-backend", async () => {
  const c = await loadConfig(["--proxmox-backend=fake"]);
  assert.equal(c.backend, "fake");
});

Deno.test("load: the fake with an API URL (or --proxmox-backend=proxmox) is refused", async () => {
  const url = "--proxmox-api-url=https://pve:8006/api2/json";
  await rejects(
    [url, "--use-fake-backend"],
    /^--use-fake-backend conflicts with --proxmox-api-url: the fake backend never talks to Proxmox/,
  );
  await rejects([url, "--proxmox-backend=fake"], /^--proxmox-backend=fake conflicts with/);
  await rejects(
    ["--proxmox-backend=proxmox", "--use-fake-backend"],
    /^--use-fake-backend: conflicts with --proxmox-backend=proxmox/,
  );
});

Deno.test("load: files read through the env hook", async () => {
  const files = new Map([
    ["/types.json", '{"t.one": {"vcpu": 3, "memory_mib": 3000, "template_vmid": 0}}'],
    [
      "/offers.json",
      '[{"instance_type": "t.one", "zone": "z9", "count": 2, "labels": {"__proto__": "p"}}]',
    ],
  ]);
  const readFile = (p: string) => {
    const text = files.get(p);
    return text === undefined ? Promise.reject(new Deno.errors.NotFound(p)) : Promise.resolve(text);
  };
  const c = await loadConfig(
    [...FAKE, "--instance-types=/types.json", "--offerings=/offers.json", "--template-vmid=777"],
    { readFile },
  );
  assert.equal(c.offeringsSource, "/offers.json");
  assert.deepEqual(c.zones, ["z9"]);
  assert.deepEqual(c.slots.map((s) => s.id), [
    "proxmox/OnDemand/t.one/z9/000",
    "proxmox/OnDemand/t.one/z9/001",
  ]);
  assert.deepEqual(c.slots[0].allocatable, [["cpu", "3"], ["memory", "3000Mi"]]);
  assert.deepEqual(c.slots[0].labels, [["__proto__", "p"]]);
  assert.deepEqual(c.catalog.get("t.one")!.template, { kind: "vmid", vmid: 777 });
  assert.equal(
    c.slots[0].pricePerHour,
    Math.round((3 * 0.003 + (3000 / 1024) * 0.0008) * 1e9) / 1e9,
  );
  await assert.rejects(
    loadConfig([...FAKE, "--offerings=/missing.json"], { readFile }),
    /^ConfigError: --offerings: cannot read "\/missing.json"/,
  );
});

Deno.test("load: offerings and catalog files on disk", async () => {
  const dir = await Deno.makeTempDir({ prefix: "config_load_" });
  try {
    const offers = `${dir}/offerings.json`;
    const types = `${dir}/types.json`;
    await Deno.writeTextFile(
      types,
      '{"a": {"vcpu": 2, "memory_mib": 2048}, "b": {"vcpu": 4, "memory_mib": 4096}}',
    );
    await Deno.writeTextFile(
      offers,
      JSON.stringify([
        { instance_type: "b", zone: "x", count: 1 },
        {
          instance_type: "a",
          zone: "y",
          count: 1,
          capacity_type: "on_demand",
          resources: { cpu: "2" },
        },
      ]),
    );
    const c = await loadConfig([...FAKE, "--offerings", offers, "--instance-types", types]);
    assert.deepEqual(c.zones, ["x", "y"]);
    assert.deepEqual(c.slots.map((s) => s.id), [
      "proxmox/OnDemand/b/x/000",
      "proxmox/OnDemand/a/y/000",
    ]);
    assert.deepEqual(c.slots[1].resources, [["cpu", "2"]]);

    // Built-in offerings pick the first and last sorted names of a file catalog.
    const builtIn = await loadConfig([...FAKE, "--instance-types", types, "--seed-count=4"]);
    assert.deepEqual(builtIn.slots.map((s) => s.instanceType), ["a", "a", "b", "b"]);

    await Deno.writeTextFile(
      offers,
      '[{"instance_type": "a", "zone": "x", "count": 1, "capacity_type": "spot"}]',
    );
    await rejects(
      [...FAKE, "--offerings", offers, "--instance-types", types],
      /^--offerings: ".*offerings.json": offering 0: capacity_type "spot" is not supported/,
    );
    await Deno.writeTextFile(offers, '[{"instance_type": "pve.small", "zone": "x", "count": 1}]');
    await rejects(
      [...FAKE, "--offerings", offers, "--instance-types", types],
      /unknown instance type "pve.small"/,
    );
    await Deno.writeTextFile(types, '{"a": {"vcpu": 0, "memory_mib": 2048}}');
    await rejects(
      [...FAKE, "--instance-types", types],
      /^--instance-types: ".*types.json": instance type "a": vcpu must be a positive integer/,
    );
    await rejects(
      [...FAKE, "--instance-types", `${dir}/none.json`],
      /^--instance-types: cannot read/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("load: --shutdown-timeout defaults past the longest transition timeout; 0 and bad values", async () => {
  const c = await loadConfig(FAKE);
  // docs/install.md#upgrades-and-restarts: the longest transition (Drain, 15m) plus the 10 s
  // calls already on the wire get, with room for the flush.
  const longest = Math.max(...Object.values(DEFAULT_TIMEOUTS));
  assert.equal(c.shutdownTimeoutMs, 16 * 60_000);
  assert.ok(c.shutdownTimeoutMs >= longest + 10_000, "outlasts the longest transition");
  assert.equal((await loadConfig([...FAKE, "--shutdown-timeout=0"])).shutdownTimeoutMs, 0);
  assert.equal((await loadConfig([...FAKE, "--shutdown-timeout=90s"])).shutdownTimeoutMs, 90_000);
  await rejects([...FAKE, "--shutdown-timeout=5"], /--shutdown-timeout.*missing unit/);
  await rejects([...FAKE, "--shutdown-timeout=-1m"], /--shutdown-timeout.*negative/);
});
