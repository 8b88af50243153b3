// deploy/Dockerfile, linted structurally (images cannot be pulled or built on
// these machines): stages, pinned base images, the compile flags against the
// deno.json `compile` task, the non-root distroless runtime stage.

import assert from "node:assert/strict";
import { ROOT } from "./helm_helpers.ts";

interface Instruction {
  op: string;
  args: string;
}

interface Stage {
  from: string;
  name: string | null;
  body: Instruction[];
}

/** Instructions with continuations joined and comments dropped, grouped by FROM. */
function parseDockerfile(text: string): Stage[] {
  const logical: string[] = [];
  let pending = "";
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (pending === "" && (line === "" || line.startsWith("#"))) continue;
    if (line.endsWith("\\")) {
      pending += line.slice(0, -1) + " ";
      continue;
    }
    logical.push(pending + line);
    pending = "";
  }
  assert.equal(pending, "", "no dangling line continuation");
  const stages: Stage[] = [];
  for (const line of logical) {
    const m = line.match(/^(\S+)\s*(.*)$/);
    assert.ok(m, line);
    const op = m[1].toUpperCase();
    const args = m[2].trim();
    if (op === "FROM") {
      const f = args.match(/^(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?$/i);
      assert.ok(f, `FROM ${args}`);
      stages.push({ from: f[1], name: f[2] ?? null, body: [] });
    } else {
      assert.ok(stages.length > 0, `${op} before the first FROM`);
      stages[stages.length - 1].body.push({ op, args });
    }
  }
  return stages;
}

const dockerfile = parseDockerfile(await Deno.readTextFile(`${ROOT}deploy/Dockerfile`));
const denoJson = JSON.parse(await Deno.readTextFile(`${ROOT}deno.json`));
const [build, runtime] = dockerfile;

function ops(stage: Stage, op: string): string[] {
  return stage.body.filter((i) => i.op === op).map((i) => i.args);
}

/** Tokens of a `deno compile` command line with the --output value removed. */
function compileFlags(cmd: string): { output: string; rest: string[] } {
  const tokens = cmd.trim().split(/\s+/);
  const at = tokens.indexOf("--output");
  assert.ok(at > 0, `--output in ${cmd}`);
  const output = tokens[at + 1];
  return { output, rest: [...tokens.slice(0, at), ...tokens.slice(at + 2)] };
}

Deno.test("Dockerfile: two stages, pinned Deno build image and distroless cc nonroot runtime", () => {
  assert.equal(dockerfile.length, 2);
  assert.equal(build.from, "denoland/deno:2.9.6");
  assert.equal(build.name, "build");
  // The compiled binary links glibc: distroless/cc, never distroless/static.
  assert.equal(runtime.from, "gcr.io/distroless/cc-debian12:nonroot");
  for (const stage of dockerfile) assert.ok(!stage.from.endsWith(":latest"), stage.from);
});

Deno.test("Dockerfile: deno compile uses exactly the flags of the deno.json compile task", () => {
  const runs = ops(build, "RUN");
  const compile = runs.filter((r) => r.startsWith("deno compile "));
  assert.equal(compile.length, 1, "one deno compile");
  const compileTask = denoJson.tasks.compile;
  const task: string = typeof compileTask === "string" ? compileTask : compileTask.command;
  const want = compileFlags(task);
  const got = compileFlags(compile[0]);
  assert.deepEqual(got.rest, want.rest, `Dockerfile: ${compile[0]}\ndeno.json: ${task}`);
  assert.equal(got.output, "/out/bigfleet-proxmox");
  // The binary must embed the wire contract the server loads at runtime.
  assert.ok(got.rest.join(" ").includes("--include proto/"));
  assert.ok(Deno.statSync(`${ROOT}proto`).isDirectory);
});

Deno.test("Dockerfile: dependencies are installed from the frozen lockfile before the source is copied", () => {
  const body = build.body.map((i) => `${i.op} ${i.args}`);
  const lockCopy = body.indexOf("COPY deno.json deno.lock ./");
  const install = body.indexOf("RUN deno install --frozen");
  const copyAll = body.indexOf("COPY . .");
  const compile = body.findIndex((l) => l.startsWith("RUN deno compile "));
  assert.ok(lockCopy >= 0 && install > lockCopy, body.join("\n"));
  assert.ok(copyAll > install && compile > copyAll, body.join("\n"));
});

Deno.test("Dockerfile: runtime stage is non-root, exposes 9000/9090, exec-form entrypoint, no shell use", () => {
  assert.deepEqual(ops(runtime, "USER"), ["65532:65532"]);
  assert.deepEqual(ops(runtime, "EXPOSE").flatMap((e) => e.split(/\s+/)).sort(), ["9000", "9090"]);
  const entry = ops(runtime, "ENTRYPOINT");
  assert.equal(entry.length, 1);
  assert.deepEqual(JSON.parse(entry[0]), ["/bigfleet-proxmox"], "exec form (no shell)");
  assert.deepEqual(ops(runtime, "COPY"), ["--from=build /out/bigfleet-proxmox /bigfleet-proxmox"]);
  // distroless has no shell: nothing in the runtime stage may need one.
  for (const op of ["RUN", "CMD", "SHELL", "ADD"]) assert.deepEqual(ops(runtime, op), [], op);
});

Deno.test("Dockerfile: its ignore file keeps the compile inputs in the build context", async () => {
  const ignore = (await Deno.readTextFile(`${ROOT}deploy/Dockerfile.dockerignore`))
    .split("\n").map((l) => l.trim()).filter((l) => l !== "" && !l.startsWith("#"));
  const needed = ["main.ts", "deno.json", "deno.lock", "src", "proto"];
  for (const pattern of ignore) {
    const base = pattern.replace(/^\*\*\//, "").replace(/\/$/, "");
    for (const path of needed) {
      assert.ok(base !== path && !path.startsWith(`${base}/`), `${pattern} would drop ${path}`);
    }
    assert.ok(!pattern.startsWith("*") || pattern.startsWith("**/*."), `broad pattern ${pattern}`);
  }
  assert.ok(ignore.includes(".git") && ignore.includes("bin/"), "VCS and build output excluded");
});
