// `completion bash|zsh|fish` through the real entrypoint, each script run by
// its real shell: at every command path it offers exactly the subcommands
// (or fixed arguments) and flags the command tables hold, which are the ones
// --help prints. bash is always here; the zsh and fish tests are ignored, with
// one line saying so, where they are not installed (apt-get install zsh fish).

import assert from "node:assert/strict";
import { COMMANDS } from "../../src/cli/cli.ts";
import type { Command } from "../../src/cli/command.ts";
import { FLAG_TABLE } from "../../src/config/flags.ts";
import { ignoreWithout } from "../harness/tools.ts";
import { cli, lines } from "./helpers.ts";

const PROGRAM = "bigfleet-proxmox";

interface Expected {
  path: string[];
  words: string[];
  flags: string[];
}

/** What each command path must offer, straight from the command tables. */
function expected(): Expected[] {
  const out: Expected[] = [];
  const visit = (cmd: Command, path: string[]) => {
    const flags = Object.entries(cmd.flags ?? {}).flatMap(([name, spec]) => [
      `--${name}`,
      ...(spec.short ? [`-${spec.short}`] : []),
    ]);
    flags.push("--help", "-h");
    if (path.length === 0) flags.push("--version");
    const subs = cmd.subcommands ?? [];
    out.push({ path, words: [...subs.map((c) => c.name), ...(cmd.choices ?? [])], flags });
    for (const sub of subs) visit(sub, [...path, sub.name]);
  };
  visit({ name: "", summary: "", usage: "", flags: FLAG_TABLE, subcommands: COMMANDS }, []);
  return out;
}

async function script(shell: string): Promise<string> {
  const r = await cli(["completion", shell]);
  assert.equal(r.code, 0, r.stderr);
  const file = await Deno.makeTempFile({ prefix: `bf-completion-`, suffix: `.${shell}` });
  await Deno.writeTextFile(file, r.stdout);
  return file;
}

async function run(shell: string, args: string[], cwd?: string): Promise<string[]> {
  const out = await new Deno.Command(shell, { args, cwd, stdout: "piped", stderr: "piped" })
    .output();
  const err = new TextDecoder().decode(out.stderr);
  assert.ok(out.success, `${shell} ${args.join(" ")}: ${err}`);
  assert.equal(err, "", `${shell} printed errors`);
  return lines(new TextDecoder().decode(out.stdout));
}

const sorted = (xs: string[]) => [...xs].sort();
/** A shell word, single-quoted. */
const q = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

/** The path's words typed, then `cur` at the cursor, as the shell hands them to the function. */
function typed(e: Expected, cur: string): string[] {
  return [PROGRAM, ...e.path, cur];
}

Deno.test("completion: bash offers each command's subcommands, arguments and flags, files after a valued flag", async () => {
  const file = await script("bash");
  const complete = (words: string[]) =>
    run("bash", [
      "-c",
      `source ${q(file)}; COMP_WORDS=(${words.map(q).join(" ")}); COMP_CWORD=${
        words.length - 1
      }; _bigfleet_proxmox; printf '%s\\n' "\${COMPREPLY[@]}"`,
    ]);
  for (const e of expected()) {
    const where = e.path.join(" ") || "(top)";
    assert.deepEqual(sorted(await complete(typed(e, ""))), sorted(e.words), `${where}: words`);
    assert.deepEqual(
      sorted(await complete(typed(e, "--"))),
      sorted(e.flags.filter((f) => f.startsWith("--"))),
      `${where}: flags`,
    );
  }
  // A flag's value is not a command, and after a valued flag the shell offers files.
  assert.deepEqual(
    await complete([PROGRAM, "machines", "list", "--state", "idle", "--ta"]),
    ["--target"],
  );
  assert.deepEqual(await complete([PROGRAM, "--offerings", ""]), []);
  assert.deepEqual(await complete([PROGRAM, "mach"]), ["machines"]);
});

const ZSH_TEST =
  "completion: zsh offers the same per command path (run by zsh, its completion helpers stubbed)";

Deno.test({
  name: ZSH_TEST,
  ignore: ignoreWithout(ZSH_TEST, "zsh", "apt-get install zsh"),
}, async () => {
  const file = await script("zsh");
  // _describe prints the array it is given; _files says FILES.
  const stubs = "_describe() { local arr=$4; print -l -- ${(P)arr} }; _files() { print FILES };";
  const complete = async (words: string[]) =>
    (await run("zsh", [
      "-f",
      "-c",
      `${stubs} source ${q(file)}; words=(${
        words.map(q).join(" ")
      }); CURRENT=${words.length}; _bigfleet_proxmox`,
    ])).map((l) => l.split(":")[0]);
  for (const e of expected()) {
    const where = e.path.join(" ") || "(top)";
    const words = await complete(typed(e, ""));
    assert.deepEqual(sorted(words), e.words.length > 0 ? sorted(e.words) : ["FILES"], where);
    assert.deepEqual(sorted(await complete(typed(e, "--"))), sorted(e.flags), `${where}: flags`);
  }
  assert.deepEqual(await complete([PROGRAM, "machines", "get", "--target", ""]), ["FILES"]);
});

const FISH_TEST = "completion: fish offers the same per command path (fish's own complete -C)";

Deno.test({
  name: FISH_TEST,
  ignore: ignoreWithout(FISH_TEST, "fish", "apt-get install fish"),
}, async () => {
  const file = await script("fish");
  // Where nothing is left to offer fish falls back to file names: none in an empty folder.
  const empty = await Deno.makeTempDir({ prefix: "bf-completion-" });
  const complete = async (line: string) =>
    (await run("fish", ["--no-config", "-c", `source ${q(file)}; complete -C ${q(line)}`], empty))
      .map((l) => l.split("\t")[0]);
  for (const e of expected()) {
    const where = e.path.join(" ") || "(top)";
    const line = [PROGRAM, ...e.path, ""].join(" ");
    assert.deepEqual(sorted(await complete(line)), sorted(e.words), where);
    assert.deepEqual(
      sorted(await complete(`${line}--`)),
      sorted(e.flags.filter((f) => f.startsWith("--"))),
      `${where}: flags`,
    );
  }
});

Deno.test("completion: no shell or an unknown one is a usage error (exit 2, one line)", async () => {
  for (const args of [[], ["powershell"], ["bash", "zsh"]]) {
    const r = await cli(["completion", ...args]);
    assert.equal(r.code, 2, args.join(" "));
    assert.equal(r.stdout, "");
    assert.equal(lines(r.stderr).length, 1);
    assert.match(r.stderr, /^error: completion takes one shell: bash, zsh or fish/);
  }
});
