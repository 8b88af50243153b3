// deploy/Dockerfile, checked for what it does (images cannot be pulled or
// built on these machines), not for its wording: the project's Deno builds
// it with the compile task's flags from the frozen lockfile; the runtime is a
// pinned glibc distroless image running that binary directly as a numeric
// non-root user, with nothing that needs a shell.

import assert from "node:assert/strict";
import { relative } from "node:path";
import { FLAG_TABLE } from "../../src/config/flags.ts";
import { PROTO_PATH } from "../../src/proto.ts";
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

Deno.test("Dockerfile: the build uses this project's Deno; the runtime is glibc distroless, pinned", () => {
  // The binary is compiled by the Deno the tests run on, not some other release.
  assert.ok(build.from.startsWith("denoland/deno:"), build.from);
  assert.equal(build.from.split(":")[1], Deno.version.deno, "build image's Deno");
  // The compiled binary links glibc: a distroless image with it (cc), never static.
  assert.match(runtime.from, /^gcr\.io\/distroless\/cc-/);
  for (const stage of dockerfile) {
    assert.ok(
      stage.from.includes(":") && !stage.from.endsWith(":latest"),
      `${stage.from} unpinned`,
    );
  }
});

Deno.test("Dockerfile: deno compile uses exactly the flags of the deno.json compile task", () => {
  const compile = ops(build, "RUN").filter((r) => r.startsWith("deno compile "));
  assert.equal(compile.length, 1, "one deno compile");
  const compileTask = denoJson.tasks.compile;
  const task: string = typeof compileTask === "string" ? compileTask : compileTask.command;
  assert.deepEqual(
    compileFlags(compile[0]).rest,
    compileFlags(task).rest,
    `Dockerfile: ${compile[0]}\ndeno.json: ${task}`,
  );
  // The server and the CLI read the contract's .proto at run time: the binary must carry it.
  const protoDir = relative(ROOT, PROTO_PATH).split("/")[0];
  assert.match(
    task,
    new RegExp(`--include[= ]${protoDir}/?(\\s|$)`),
    `the compile task embeds ${protoDir}/, where ${relative(ROOT, PROTO_PATH)} is`,
  );
});

Deno.test("Dockerfile: dependencies come from the frozen lockfile", () => {
  const body = build.body.map((i) => `${i.op} ${i.args}`);
  const install = body.findIndex((l) => /^RUN deno install\b.*--frozen\b/.test(l));
  const compile = body.findIndex((l) => l.startsWith("RUN deno compile "));
  assert.ok(
    install >= 0 && install < compile,
    `a frozen install before the compile:\n${body.join("\n")}`,
  );
  const lock = body.findIndex((l) => /^COPY\b.*\bdeno\.lock\b/.test(l) || l === "COPY . .");
  assert.ok(lock >= 0 && lock < install, "deno.lock is in place for the install");
});

Deno.test("Dockerfile: the runtime runs the compiled binary directly, as a numeric non-root user", () => {
  const [user] = ops(runtime, "USER");
  assert.match(user ?? "", /^[1-9]\d*:[1-9]\d*$/, "numeric uid:gid, not root (runAsNonRoot)");
  const entry = ops(runtime, "ENTRYPOINT");
  assert.equal(entry.length, 1);
  const argv = JSON.parse(entry[0]);
  assert.ok(Array.isArray(argv) && argv.length === 1, "exec form: signals reach the binary");
  // What the entrypoint runs is what the build stage compiled.
  const output = compileFlags(ops(build, "RUN").find((r) => r.startsWith("deno compile "))!).output;
  assert.deepEqual(ops(runtime, "COPY"), [`--from=build ${output} ${argv[0]}`]);
  // distroless has no shell: nothing in the runtime stage may need one.
  for (const op of ["RUN", "CMD", "SHELL", "ADD"]) assert.deepEqual(ops(runtime, op), [], op);
  // The ports it documents are the listeners' defaults.
  const ports = [FLAG_TABLE.addr.default, FLAG_TABLE["metrics-addr"].default].map((a) =>
    a.split(":").at(-1)
  );
  assert.deepEqual(ops(runtime, "EXPOSE").flatMap((e) => e.split(/\s+/)).sort(), ports.sort());
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
