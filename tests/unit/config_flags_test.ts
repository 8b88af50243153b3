import assert from "node:assert/strict";
import { FLAG_TABLE, normaliseArgv, parseFlags } from "../../src/config/flags.ts";
import { ConfigError } from "../../src/config/types.ts";

Deno.test("flags: defaults match product.md §3", () => {
  const f = parseFlags([]);
  assert.equal(f.addr, ":9000");
  assert.equal(f.provider, "proxmox");
  assert.equal(f["proxmox-backend"], "auto");
  assert.equal(f["use-fake-backend"], false);
  assert.equal(f["fake-delay"], "0s");
  assert.equal(f["seed-count"], "32");
  assert.equal(f["default-zone"], "pve");
  assert.equal(f["template-vmid"], "9000");
  assert.equal(f["template-name"], "");
  assert.equal(f["price-per-vcpu-hour"], "0.0030");
  assert.equal(f["price-per-gib-hour"], "0.0008");
  assert.equal(f["bootstrap-path"], "/run/bigfleet-bootstrap");
  assert.equal(f["bootstrap-exec"], "/bin/sh");
  assert.equal(f["reconcile-interval"], "2m");
  assert.equal(f["metrics-addr"], ":9090");
  assert.equal(f.reflection, true);
  assert.equal(f.state, "");
  assert.equal(Object.keys(FLAG_TABLE).length, 31);
});

Deno.test("flags: every Go-style value syntax", () => {
  for (const argv of [["--addr=:1"], ["--addr", ":1"], ["-addr=:1"], ["-addr", ":1"]]) {
    assert.equal(parseFlags(argv).addr, ":1", argv.join(" "));
  }
});

Deno.test("flags: booleans bare or with a value", () => {
  assert.equal(parseFlags(["--use-fake-backend"])["use-fake-backend"], true);
  assert.equal(parseFlags(["-use-fake-backend"])["use-fake-backend"], true);
  assert.equal(parseFlags(["--use-fake-backend=true"])["use-fake-backend"], true);
  assert.equal(parseFlags(["--use-fake-backend=1"])["use-fake-backend"], true);
  assert.equal(parseFlags(["--reflection=false"]).reflection, false);
  assert.equal(parseFlags(["-reflection=F"]).reflection, false);
  assert.equal(parseFlags(["--reflection=0"]).reflection, false);
  assert.equal(parseFlags(["--reflection"]).reflection, true);
  assert.throws(() => parseFlags(["--reflection=maybe"]), /--reflection: invalid boolean "maybe"/);
  // A bool never takes the next argument, as in Go.
  assert.throws(() => parseFlags(["--reflection", "false"]), /unexpected argument "false"/);
});

Deno.test("flags: a separate value may start with a dash; last one wins", () => {
  assert.equal(parseFlags(["--seed-count", "-5"])["seed-count"], "-5");
  assert.equal(parseFlags(["--seed-count=1", "--seed-count=2"])["seed-count"], "2");
  assert.equal(parseFlags(["--metrics-addr="])["metrics-addr"], "");
  assert.equal(parseFlags(["--metrics-addr", ""])["metrics-addr"], "");
  assert.equal(parseFlags(["--prices=a=1,b=2"]).prices, "a=1,b=2");
  assert.equal(parseFlags(["--use-fake-backend", "--"])["use-fake-backend"], true);
});

Deno.test("flags: unknown flags and stray arguments are errors naming them", () => {
  const cases: [string[], RegExp][] = [
    [["--nope"], /^unknown flag --nope$/],
    [["-nope=1"], /^unknown flag --nope$/],
    [["--addr"], /^flag needs an argument: --addr$/],
    [["stray"], /unexpected argument "stray"/],
    [["-"], /unexpected argument "-"/],
    [["---addr=:1"], /bad flag syntax/],
    [["--=x"], /bad flag syntax/],
    [["--", "x"], /unexpected argument "x"/],
  ];
  for (const [argv, re] of cases) {
    assert.throws(
      () => parseFlags(argv),
      (e: unknown) => e instanceof ConfigError && re.test(e.message),
    );
  }
});

Deno.test("flags: a mistyped secret flag never echoes its value", () => {
  try {
    parseFlags(["--proxmox-token-secrt=hunter2"]);
    assert.fail("expected an error");
  } catch (e) {
    assert.ok(e instanceof ConfigError);
    assert.ok(!e.message.includes("hunter2"), e.message);
  }
});

Deno.test("flags: normalised argv is parseArgs-ready", () => {
  assert.deepEqual(normaliseArgv(["-addr", ":1", "--use-fake-backend", "-reflection=false"]), [
    "--addr=:1",
    "--use-fake-backend=true",
    "--reflection=false",
  ]);
});
