import assert from "node:assert/strict";
import { FLAG_TABLE, nearest, parseArgv, parseFlags } from "../../src/config/flags.ts";
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
  assert.equal(f["log-level"], "");
  assert.equal(f["log-format"], "");
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
    [["-nope=1"], /^unknown flag -nope$/],
    [["--node=a"], /^unknown flag --node \(did you mean --nodes\?\)$/],
    [["-adr", ":1"], /^unknown flag -adr \(did you mean -addr\?\)$/],
    [["--help"], /^unknown flag --help$/],
    [["-h"], /^unknown flag -h$/],
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

Deno.test("flags: help and version are recognised only where asked for", () => {
  for (const argv of [["-h"], ["--h"], ["-help"], ["--help"], ["--addr=:1", "-h", "--bogus"]]) {
    const p = parseArgv(FLAG_TABLE, argv, { help: true });
    assert.equal(p.help, true, argv.join(" "));
  }
  assert.equal(parseArgv(FLAG_TABLE, ["--version"], { version: true }).version, true);
  assert.throws(
    () => parseArgv(FLAG_TABLE, ["--version"], { help: true }),
    /^.*unknown flag --version$/,
  );
  assert.throws(
    () => parseArgv(FLAG_TABLE, ["--bogus", "-h"], { help: true }),
    /unknown flag --bogus/,
  );
});

Deno.test("flags: positionals, short aliases and `--` where a table allows them", () => {
  const table = {
    output: { kind: "string", default: "table", topic: "T", help: "h", short: "o" },
    all: { kind: "bool", default: false, topic: "T", help: "h" },
  } as const;
  const p = parseArgv(table, ["a", "-o", "json", "b", "--all", "--", "-c"], { positionals: true });
  assert.deepEqual(p.positionals, ["a", "b", "-c"]);
  assert.equal(p.values.output, "json");
  assert.equal(p.values.all, true);
  assert.equal(parseArgv(table, ["--o=yaml"]).values.output, "yaml");
  assert.throws(() => parseArgv(table, ["x"]), /unexpected argument "x"/);
});

Deno.test("flags: suggestions take a unique prefix or a near miss, never a far one", () => {
  const names = Object.keys(FLAG_TABLE);
  assert.equal(nearest("node", names), "nodes");
  assert.equal(nearest("proxmox-api", names), "proxmox-api-url");
  assert.equal(nearest("reflecton", names), "reflection");
  assert.equal(nearest("metric-addr", names), "metrics-addr");
  assert.equal(nearest("tls-cret", names), "tls-cert");
  assert.equal(nearest("proxmox-token", names), undefined, "ambiguous prefix");
  assert.equal(nearest("zzzz", names), undefined);
  assert.equal(nearest("x", names), undefined);
});
