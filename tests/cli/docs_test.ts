// The docs say what the binary does: every serving flag sits in
// docs/configuration.md under its help topic with the default help prints,
// every command and subcommand flag is in docs/cli.md, every runner flag in
// the README's conformance section.

import assert from "node:assert/strict";
import { FLAG_TABLE, type FlagSpec, type FlagTable } from "../../src/config/flags.ts";
import { COMMANDS } from "../../src/cli/cli.ts";
import type { Command } from "../../src/cli/command.ts";
import { RUNNER_FLAGS } from "../conformance/run.ts";
import { REPO_ROOT } from "../harness/process.ts";

const read = (p: string) => Deno.readTextFile(`${REPO_ROOT}${p}`);

/** The default cell docs/configuration.md uses. */
function docDefault(spec: FlagSpec): string {
  if (spec.kind === "bool" || spec.default !== "") return `\`${spec.default}\``;
  return `(${spec.none ?? "empty"})`;
}

Deno.test("docs: every serving flag is in docs/configuration.md under its topic, with its default", async () => {
  const text = await read("docs/configuration.md");
  const reference = text.slice(text.indexOf("## Flag reference"), text.indexOf("## Backend modes"));
  const rows = new Map<string, { topic: string; cells: string[] }>();
  let topic = "";
  for (const line of reference.split("\n")) {
    const h = /^### (.*)$/.exec(line);
    if (h) topic = h[1].replace(/ \(.*\)$/, "");
    const row = /^\| `--([a-z0-9-]+)`\s*\|(.*)$/.exec(line);
    if (row) rows.set(row[1], { topic, cells: row[2].split("|").map((c) => c.trim()) });
  }
  for (const [name, spec] of Object.entries(FLAG_TABLE as FlagTable)) {
    const r = rows.get(name);
    assert.ok(r, `--${name} has a row in docs/configuration.md`);
    assert.equal(r.topic, spec.topic, `--${name}: topic`);
    assert.equal(r.cells[0], docDefault(spec), `--${name}: default`);
  }
  assert.deepEqual([...rows.keys()].sort(), Object.keys(FLAG_TABLE).sort(), "no stale rows");
});

/**
 * Each command's own flags. The serving flags a command takes over unchanged
 * (preflight) are docs/configuration.md's, checked above.
 */
function flagsOf(cmd: Command, path: string[] = []): [string, string[]][] {
  const serving = FLAG_TABLE as FlagTable;
  const own = (flags: FlagTable) => Object.keys(flags).filter((f) => flags[f] !== serving[f]);
  const here: [string, string[]][] = cmd.flags && cmd.name !== "serve"
    ? [[[...path, cmd.name].join(" "), own(cmd.flags)]]
    : [];
  return [...here, ...(cmd.subcommands ?? []).flatMap((c) => flagsOf(c, [...path, cmd.name]))];
}

Deno.test("docs: docs/cli.md covers every command and each of its flags", async () => {
  const text = await read("docs/cli.md");
  for (const cmd of COMMANDS) {
    assert.match(text, new RegExp(`^#+ .*\\b${cmd.name}\\b`, "m"), `a section for ${cmd.name}`);
    for (const sub of cmd.subcommands ?? []) {
      assert.ok(text.includes(`${cmd.name} ${sub.name}`), `${cmd.name} ${sub.name}`);
    }
  }
  for (const [path, flags] of COMMANDS.flatMap((c) => flagsOf(c))) {
    for (const f of flags) assert.ok(text.includes(`\`--${f}`), `${path}: --${f} in docs/cli.md`);
  }
  for (const link of ["docs/cli.md", "cli.md"]) {
    const page = link === "cli.md" ? "docs/README.md" : "README.md";
    assert.ok((await read(page)).includes(`(${link}`), `${page} links ${link}`);
  }
});

Deno.test("docs: the README's conformance section lists every runner flag", async () => {
  const text = await read("README.md");
  const at = text.indexOf("## Conformance for your provider");
  assert.ok(at >= 0, "a conformance section");
  const section = text.slice(at, text.indexOf("\n## ", at + 1));
  for (const f of Object.keys(RUNNER_FLAGS)) assert.ok(section.includes(`--${f}`), `--${f}`);
  assert.ok(section.includes("deno task conformance --target"), "the --target invocation");
});

Deno.test({
  name:
    "docs: configuration.md says a changed offerings file is applied over an existing --state, as the binary does",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const text = await read("docs/configuration.md");
    const offerings = text.slice(text.indexOf("## Offerings"), text.indexOf("## Pricing"));
    assert.doesNotMatch(offerings, /no effect/, "§ Offerings must not say a change has no effect");
    assert.match(offerings, /changed offerings file .* is applied at the next\s+start/);
    // What the binary does: the second start with more slots serves them, and says so.
    const { fakeProviderArgs, startProvider, Harness, waitForServing } = await import(
      "../harness/mod.ts"
    );
    const dir = await Deno.makeTempDir({ prefix: "bf-docs-" });
    const file = `${dir}/offerings.json`;
    const offer = (count: number) =>
      Deno.writeTextFile(
        file,
        JSON.stringify([{ instance_type: "pve.small", zone: "pve-a", count }]),
      );
    const args = fakeProviderArgs({
      seed: 0,
      state: `${dir}/state.kv`,
      extra: [`--offerings=${file}`],
    });
    try {
      for (
        const [count, capacity] of [[2, undefined], [3, "+1 slots, -0 retired, 0 pending"]] as const
      ) {
        await offer(count);
        const p = await startProvider({ args });
        const h = new Harness(p.addr);
        try {
          assert.equal((await h.list()).machines.length, count);
          const serving = await waitForServing(p);
          assert.equal(serving.capacity, capacity);
        } finally {
          h.close();
          await p.stop();
        }
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
