// The simulator as an operator starts it (`deno task pvesim`, docs/try-it.md):
// --help prints its flags and starts nothing; a bad flag is one line and exit
// 2; it prints the provider flags that reach it, they work, and SIGTERM
// stops it and removes its PKI folder.

import assert from "node:assert/strict";
import { REPO_ROOT } from "../harness/process.ts";
import { cli, lines } from "../cli/helpers.ts";

const TASK = [Deno.execPath(), "task", "--quiet", "pvesim"];
/** What the task runs, run directly: a signal then reaches the simulator itself. */
const TASK_COMMAND =
  (JSON.parse(Deno.readTextFileSync(`${REPO_ROOT}deno.json`)).tasks.pvesim as string)
    .split(" ").map((w, i) => (i === 0 && w === "deno" ? Deno.execPath() : w));

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch {
    return false;
  }
}

Deno.test("pvesim: --help prints the flags and starts no simulator; a bad flag exits 2", async () => {
  const r = await cli(["--help"], { cmd: TASK, timeoutMs: 20_000 });
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /^Usage: deno task pvesim \[flags\]/);
  for (const flag of ["--port", "--nodes", "--secret", "--cert-dir", "--slow", "--time-scale"]) {
    assert.ok(r.stdout.includes(flag), flag);
  }
  assert.ok(!r.stdout.includes("listening"), "no simulator was started");
  const bad = await cli(["--prot=8006"], { cmd: TASK, timeoutMs: 20_000 });
  assert.equal(bad.code, 2);
  assert.deepEqual(lines(bad.stderr), ["error: unknown flag --prot (did you mean --port?)"]);
});

Deno.test("pvesim: its printed provider flags reach it; SIGTERM stops it and removes its PKI folder", async () => {
  const child = new Deno.Command(TASK_COMMAND[0], {
    args: [...TASK_COMMAND.slice(1), "--port=0"],
    cwd: REPO_ROOT,
    stdout: "piped",
    stderr: "piped",
    stdin: "null",
  }).spawn();
  let out = "";
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  // Bounded: a simulator that never prints its flags is killed, which ends the read below.
  const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
  try {
    while (
      !out.includes("provider flags: ") ||
      !out.slice(out.indexOf("provider flags: ")).includes("\n")
    ) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`pvesim ended before printing its flags:\n${out}`);
      out += value;
    }
    const flags = lines(out).find((l) => l.startsWith("provider flags: "))!.slice(16).split(" ");
    const caFile = /^CA file: +(.+)$/m.exec(out)![1];
    const pki = caFile.slice(0, caFile.lastIndexOf("/"));
    assert.ok(await exists(pki), "the PKI folder exists while it runs");
    // The flags are enough for the real backend: preflight's connection checks pass.
    const pre = await cli(["preflight", ...flags, "-o", "json"], { timeoutMs: 60_000 });
    const report = JSON.parse(pre.stdout);
    for (const check of ["api", "token", "node"]) {
      const results = report.checks.filter((c: { check: string }) => c.check === check);
      assert.ok(results.length > 0, check);
      assert.ok(
        results.every((c: { status: string }) => c.status === "PASS"),
        JSON.stringify(results),
      );
    }
    child.kill("SIGTERM");
    const status = await child.status;
    assert.equal(status.code, 0, "a clean stop");
    assert.equal(await exists(pki), false, `${pki} is removed`);
  } finally {
    clearTimeout(timer);
    try {
      child.kill("SIGKILL");
    } catch { /* gone */ }
    await reader.cancel().catch(() => {});
    await child.stderr.cancel().catch(() => {});
  }
});
