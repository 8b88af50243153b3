// Help, version and flag mistakes through the real entrypoint: `main.ts` under
// `deno run`, exactly as an operator types it.

import assert from "node:assert/strict";
import { FLAG_TABLE, type FlagTable } from "../../src/config/flags.ts";
import { COMMANDS } from "../../src/cli/cli.ts";
import type { Command } from "../../src/cli/command.ts";
import { cli, lines } from "./helpers.ts";

type Spec = { kind: string; default: string | boolean; topic: string; none?: string };
const TABLE = FLAG_TABLE as Record<string, Spec>;

/** How help shows a default: Go-style quoting for strings, bare booleans. */
function shownDefault(spec: Spec): string {
  if (spec.kind === "bool") return `(default ${spec.default})`;
  if (spec.default === "") return `(default: ${spec.none ?? "empty"})`;
  return `(default ${JSON.stringify(spec.default)})`;
}

/**
 * The help text's flag entries (a flag line indented 2 to 6 spaces, plus its
 * wrapped continuation lines), each with the topic heading above it.
 */
function flagLines(text: string): Map<string, { topic: string; line: string }> {
  const out = new Map<string, { topic: string; line: string }>();
  let topic = "";
  let last: { topic: string; line: string } | undefined;
  for (const line of text.split("\n")) {
    const heading = /^(\S.*):$/.exec(line);
    if (heading) topic = heading[1];
    const flag = /^ {2,6}(?:-\w, )?--([a-z0-9-]+)\b/.exec(line);
    if (flag) {
      last = { topic, line };
      out.set(flag[1], last);
    } else if (last && /^ {7,}\S/.test(line)) {
      last.line += " " + line.trim();
    } else {
      last = undefined;
    }
  }
  return out;
}

function assertServeHelp(stdout: string, what: string) {
  const found = flagLines(stdout);
  for (const [name, spec] of Object.entries(TABLE)) {
    const f = found.get(name);
    assert.ok(f, `${what}: --${name} missing from help:\n${stdout}`);
    assert.equal(f.topic, spec.topic, `${what}: --${name} listed under ${f.topic}`);
    assert.ok(
      f.line.includes(shownDefault(spec)),
      `${what}: ${f.line} lacks ${shownDefault(spec)}`,
    );
  }
  // Topics appear once each, in the table's order.
  const headings = stdout.split("\n").filter((l) => /^\S.*:$/.test(l)).map((l) => l.slice(0, -1));
  const topics = [...new Set(Object.values(TABLE).map((s) => s.topic))];
  assert.deepEqual(headings.filter((h) => topics.includes(h)), topics, stdout);
  assert.match(stdout, /^Usage: bigfleet-proxmox/m);
  assert.match(stdout, /^\s+machines\s+\S/m, "the command list names machines");
  assert.match(stdout, /-h, --help/);
  assert.match(stdout, /--version/);
}

Deno.test("help: --help, -h, -help, --h and `help` print the serving usage grouped by topic with defaults, exit 0", async () => {
  for (const args of [["--help"], ["-h"], ["-help"], ["--h"], ["help"], ["help", "serve"]]) {
    const r = await cli(args);
    assert.equal(r.code, 0, `${args.join(" ")}: ${r.stderr}`);
    assert.equal(r.stderr, "", args.join(" "));
    assertServeHelp(r.stdout, args.join(" "));
  }
});

Deno.test("help: a help flag anywhere among serving flags prints help instead of serving", async () => {
  const r = await cli(["--use-fake-backend", "--addr=127.0.0.1:1", "-h"]);
  assert.equal(r.code, 0, r.stderr);
  assertServeHelp(r.stdout, "flags then -h");
});

Deno.test("help: `help machines`, `machines --help` and `help machines list` describe the machines CLI", async () => {
  for (const args of [["help", "machines"], ["machines", "--help"], ["machines", "-h"]]) {
    const r = await cli(args);
    assert.equal(r.code, 0, `${args.join(" ")}: ${r.stderr}`);
    for (const sub of ["list", "get", "watch"]) {
      assert.match(r.stdout, new RegExp(`^\\s+${sub}\\s+\\S`, "m"), `${args.join(" ")}: ${sub}`);
    }
    assert.match(r.stdout, /--target\b.*\(default "127\.0\.0\.1:9000"\)/);
  }
  for (const args of [["help", "machines", "list"], ["machines", "list", "--help"]]) {
    const r = await cli(args);
    assert.equal(r.code, 0, `${args.join(" ")}: ${r.stderr}`);
    assert.match(r.stdout, /^Usage: bigfleet-proxmox machines list/m);
    for (const flag of ["state", "zone", "type", "output", "target", "tls-ca", "no-headers"]) {
      assert.match(r.stdout, new RegExp(`--${flag}\\b`), `${args.join(" ")}: --${flag}`);
    }
    assert.match(r.stdout, /-o, --output\b.*\(default "table"\)/);
  }
});

/** The top-level commands as an unknown command lists them. */
const TOP = "serve, preflight, smoke, machines, state, completion, version and help";

Deno.test("help: an unknown help topic is a usage error (exit 2) with a suggestion", async () => {
  const r = await cli(["help", "machine"]);
  assert.equal(r.code, 2);
  assert.deepEqual(lines(r.stderr), [
    `error: unknown command "machine" (did you mean "machines"?); the commands are ${TOP}`,
  ]);
  assert.equal(r.stdout, "");
});

Deno.test("flags: an unknown flag is reported as typed, with the nearest flag suggested (exit 2, one line)", async () => {
  const cases: [string[], string][] = [
    [["--node=pve1"], "error: unknown flag --node (did you mean --nodes?)"],
    [["-node", "pve1"], "error: unknown flag -node (did you mean -nodes?)"],
    [["--reflecton=false"], "error: unknown flag --reflecton (did you mean --reflection?)"],
    [["--proxmox-api=x"], "error: unknown flag --proxmox-api (did you mean --proxmox-api-url?)"],
    [["-x"], "error: unknown flag -x"],
    [["--zzzzzzzz"], "error: unknown flag --zzzzzzzz"],
  ];
  for (const [args, want] of cases) {
    const r = await cli(["--use-fake-backend", "--metrics-addr=", ...args]);
    assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
    assert.deepEqual(lines(r.stderr), [want], args.join(" "));
  }
});

Deno.test("flags: a mistyped secret flag is named and suggested, its value never echoed", async () => {
  const r = await cli(["--proxmox-token-secrt=hunter2"]);
  assert.equal(r.code, 2);
  assert.deepEqual(lines(r.stderr), [
    "error: unknown flag --proxmox-token-secrt (did you mean --proxmox-token-secret?)",
  ]);
  assert.ok(!r.stderr.includes("hunter2"));
});

Deno.test("commands: an unknown command is a usage error with a suggestion", async () => {
  const r = await cli(["machine", "list"]);
  assert.equal(r.code, 2);
  assert.deepEqual(lines(r.stderr), [
    `error: unknown command "machine" (did you mean "machines"?); the commands are ${TOP}`,
  ]);
  const s = await cli(["machines", "lst"]);
  assert.equal(s.code, 2);
  assert.deepEqual(lines(s.stderr), [
    `error: unknown command "machines lst" (did you mean "machines list"?); the commands of machines are list, get, watch, recover and room`,
  ]);
  // Nothing close: the list alone says what exists.
  const frob = await cli(["frob"]);
  assert.equal(frob.code, 2);
  assert.deepEqual(lines(frob.stderr), [`error: unknown command "frob"; the commands are ${TOP}`]);
  const t = await cli(["machines"]);
  assert.equal(t.code, 2);
  assert.match(t.stderr, /^error: machines needs a command: list, get, watch, recover or room$/m);
});

/** Every command below the top level with flags of its own, by invocation path. */
function leaves(cmds: readonly Command[], path: string[] = []): [string[], FlagTable][] {
  return cmds.flatMap((c) => {
    if (c.name === "serve") return [];
    const here = [...path, c.name];
    const own: [string[], FlagTable][] = c.flags ? [[here, c.flags]] : [];
    return [...own, ...leaves(c.subcommands ?? [], here)];
  });
}

Deno.test("help: every command's help lists each of its flags under its topic with its default", async () => {
  const all = leaves(COMMANDS);
  assert.ok(all.length >= 5, "machines, list, get, watch, version");
  for (const [path, table] of all) {
    const r = await cli([...path, "--help"]);
    assert.equal(r.code, 0, `${path.join(" ")}: ${r.stderr}`);
    const found = flagLines(r.stdout);
    for (const [name, spec] of Object.entries(table as Record<string, Spec>)) {
      const f = found.get(name);
      assert.ok(f, `${path.join(" ")}: --${name} missing:\n${r.stdout}`);
      assert.equal(f.topic, spec.topic, `${path.join(" ")}: --${name} topic`);
      assert.ok(f.line.includes(shownDefault(spec)), `${path.join(" ")}: ${f.line}`);
    }
  }
});
