// The version everywhere an operator looks: --version / `version`, the
// serving log line, the build_info gauge; and where the commit comes from in
// a build (the stamp written before `deno compile`, embedded with --include).

import assert from "node:assert/strict";
import { parse as parseYaml } from "yaml";
import { COMMIT_STAMP, VERSION } from "../../src/version.ts";
import { DEFAULT_PROVIDER_CMD, REPO_ROOT } from "../harness/process.ts";
import { sample, scrape, startWithMetrics, waitForServing } from "../server/helpers.ts";
import { cli, lines } from "./helpers.ts";

const opts = { sanitizeOps: false, sanitizeResources: false };
const HEX40 = "0123456789abcdef0123456789abcdef01234567";

/** `key: value` lines of the text output. */
function fields(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const l of lines(text).slice(1)) {
    const m = /^(\w+):\s+(.*)$/.exec(l);
    assert.ok(m, `not a "key: value" line: ${l}`);
    out[m[1]] = m[2];
  }
  return out;
}

Deno.test("version: --version, -version and `version` print version, commit, Deno, V8, TypeScript; exit 0", async () => {
  for (const args of [["--version"], ["-version"], ["version"]]) {
    const r = await cli(args);
    assert.equal(r.code, 0, `${args.join(" ")}: ${r.stderr}`);
    assert.equal(r.stderr, "");
    assert.equal(lines(r.stdout)[0], `bigfleet-proxmox ${VERSION}`);
    const f = fields(r.stdout);
    // The child is this same deno binary.
    assert.equal(f.deno, Deno.version.deno);
    assert.equal(f.v8, Deno.version.v8);
    assert.equal(f.typescript, Deno.version.typescript);
    assert.match(f.commit, /^([0-9a-f]{7,40}|unknown)$/);
  }
});

Deno.test("version: `version -o json` is one JSON object for scripts; a bad -o is a usage error", async () => {
  const r = await cli(["version", "-o", "json"]);
  assert.equal(r.code, 0, r.stderr);
  const v = JSON.parse(r.stdout);
  assert.deepEqual(Object.keys(v).sort(), ["commit", "deno", "typescript", "v8", "version"]);
  assert.equal(v.version, VERSION);
  assert.equal(v.deno, Deno.version.deno);
  const bad = await cli(["version", "-o", "xml"]);
  assert.equal(bad.code, 2);
  assert.deepEqual(lines(bad.stderr), [`error: --output: want text or json, got "xml"`]);
});

Deno.test("version: VERSION is the chart's appVersion", async () => {
  const chart = parseYaml(await Deno.readTextFile(`${REPO_ROOT}deploy/helm/Chart.yaml`));
  assert.equal(chart.appVersion, VERSION);
});

/** A copy of what `deno compile` reads (no .git, no stamp), to stamp and run in isolation. */
async function buildTree(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "bf-version-" });
  for (const f of ["main.ts", "deno.json", "deno.lock"]) {
    await Deno.copyFile(`${REPO_ROOT}${f}`, `${dir}/${f}`);
  }
  for (const d of ["src", "proto"]) {
    const cp = await new Deno.Command("cp", { args: ["-R", `${REPO_ROOT}${d}`, `${dir}/${d}`] })
      .output();
    assert.equal(cp.code, 0);
  }
  return dir;
}

/** `deno task stamp` in `dir`, as the compile task and the Dockerfile run it. */
async function stamp(dir: string, env: Record<string, string> = {}) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["task", "stamp"],
    cwd: dir,
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
}

async function versionIn(dir: string): Promise<Record<string, string>> {
  const r = await cli(["--version"], {
    cwd: dir,
    // The compile task's permissions, on the copy's main.ts.
    cmd: [...DEFAULT_PROVIDER_CMD.slice(0, -1), `${dir}/main.ts`],
  });
  assert.equal(r.code, 0, r.stderr);
  return fields(r.stdout);
}

Deno.test("version: the commit is the build stamp: BIGFLEET_COMMIT, else git, else unknown; never a failure", async () => {
  const dir = await buildTree();
  try {
    const stampFile = `${dir}/${COMMIT_STAMP}`;
    // No stamp at all (a plain `deno run` of a source tree): unknown.
    assert.equal((await versionIn(dir)).commit, "unknown");

    // The Docker build passes the commit as a build argument.
    assert.equal((await stamp(dir, { BIGFLEET_COMMIT: HEX40 })).code, 0);
    assert.equal((await Deno.readTextFile(stampFile)).trim(), HEX40);
    assert.equal((await versionIn(dir)).commit, HEX40);

    // A typo in the build argument stops the build rather than shipping a wrong commit.
    const bad = await stamp(dir, { BIGFLEET_COMMIT: "not-a-commit" });
    assert.notEqual(bad.code, 0);
    assert.match(bad.stderr, /BIGFLEET_COMMIT.*"not-a-commit"/);

    // No build argument and no git repository: stamped unknown, the build goes on.
    assert.equal((await stamp(dir)).code, 0);
    assert.equal((await versionIn(dir)).commit, "unknown");

    // In a git checkout: HEAD.
    const git = (...args: string[]) =>
      new Deno.Command("git", {
        args: ["-c", "user.email=t@example.invalid", "-c", "user.name=t", ...args],
        cwd: dir,
        stdout: "piped",
        stderr: "null",
      }).output();
    await git("init", "-q");
    await git("add", "main.ts");
    await git("commit", "-q", "-m", "x");
    const head = new TextDecoder().decode((await git("rev-parse", "HEAD")).stdout).trim();
    assert.match(head, /^[0-9a-f]{40}$/);
    assert.equal((await stamp(dir)).code, 0);
    assert.equal((await versionIn(dir)).commit, head);

    // A damaged stamp reads as unknown; the binary still starts.
    await Deno.writeTextFile(stampFile, "<<garbage>>\n");
    assert.equal((await versionIn(dir)).commit, "unknown");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("version: the compile task and the Dockerfile stamp the commit, then embed it", async () => {
  const deno = JSON.parse(await Deno.readTextFile(`${REPO_ROOT}deno.json`));
  const compile = deno.tasks.compile;
  assert.deepEqual(compile.dependencies, ["stamp"], "compile stamps first");
  assert.ok(compile.command.includes(`--include ${COMMIT_STAMP}`), compile.command);
  const docker = await Deno.readTextFile(`${REPO_ROOT}deploy/Dockerfile`);
  const at = (re: RegExp) => docker.split("\n").findIndex((l) => re.test(l));
  const arg = at(/^ARG BIGFLEET_COMMIT\b/);
  const run = at(/^RUN deno task stamp$/);
  const build = at(/^RUN deno compile /);
  assert.ok(arg >= 0 && run > arg && build > run, "ARG, then stamp, then compile");
});

Deno.test({
  name: "version: the serving line and bigfleet_proxmox_build_info carry version and commit",
  ...opts,
  async fn() {
    const proc = await startWithMetrics(["--seed-count=2"]);
    try {
      const serving = await waitForServing(proc);
      assert.equal(serving.version, VERSION);
      assert.match(String(serving.commit), /^([0-9a-f]{7,40}|unknown)$/);
      const v = await cli(["version", "-o", "json"]);
      const info = JSON.parse(v.stdout);
      assert.equal(serving.commit, info.commit);
      const s = await scrape(proc.metricsPort);
      assert.equal(
        sample(s, "bigfleet_proxmox_build_info", {
          version: VERSION,
          commit: info.commit,
          deno: Deno.version.deno,
          v8: Deno.version.v8,
          typescript: Deno.version.typescript,
        }),
        1,
      );
    } finally {
      await proc.stop();
    }
  },
});
