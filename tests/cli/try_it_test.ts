// docs/try-it.md, followed: the standalone simulator (`deno task pvesim`'s
// command), the provider started with the flags it prints and the page's
// own flags, the page's machine walked to CONFIGURED by the page's grpcurl
// lines run in bash (where grpcurl is not installed, by the same two calls
// from the test's client, with a line saying so), and `machines get`
// showing it. The page's command lines use only flags the binary has.

import assert from "node:assert/strict";
import { COMMANDS } from "../../src/cli/cli.ts";
import type { Command } from "../../src/cli/command.ts";
import { FLAG_TABLE } from "../../src/config/flags.ts";
import { Harness, MachineState, startProvider } from "../harness/mod.ts";
import { REPO_ROOT } from "../harness/process.ts";
import { spawnStandalone } from "../pvesim/standalone.ts";
import { cli, lines } from "./helpers.ts";

const PAGE = `${REPO_ROOT}docs/try-it.md`;

/** The sh blocks of the page, continuation lines joined. */
function shLines(page: string): string[] {
  return [...page.matchAll(/```sh\n([\s\S]*?)```/g)]
    .flatMap((m) => m[1].replace(/\\\n\s*/g, " ").split("\n"))
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("#"));
}

function commandFlags(cmds: readonly Command[]): Set<string> {
  const out = new Set(Object.keys(FLAG_TABLE));
  const visit = (c: Command) => {
    for (const f of Object.keys(c.flags ?? {})) out.add(f);
    for (const s of c.subcommands ?? []) visit(s);
  };
  cmds.forEach(visit);
  return out;
}

/** grpcurl on PATH or in Go's bin folder; null when there is none. */
async function findGrpcurl(): Promise<string | null> {
  const candidates = [
    ...(Deno.env.get("PATH") ?? "").split(":").map((d) => `${d}/grpcurl`),
    `${Deno.env.get("HOME")}/go/bin/grpcurl`,
  ];
  for (const c of candidates) {
    try {
      if ((await Deno.stat(c)).isFile) return c;
    } catch { /* not there */ }
  }
  return null;
}

Deno.test("try-it: every bigfleet-proxmox and pvesim command line on the page uses flags the binary has", async () => {
  const page = await Deno.readTextFile(PAGE);
  const known = commandFlags(COMMANDS);
  const used = shLines(page).filter((l) => /^(bigfleet-proxmox|deno task pvesim)\b/.test(l));
  assert.ok(used.length >= 6, used.join("\n"));
  for (const line of used) {
    for (const m of line.matchAll(/(?:^|\s)--([a-z][a-z0-9-]*)/g)) {
      if (line.startsWith("deno task pvesim")) continue;
      assert.ok(known.has(m[1]) || m[1] === "help", `${line}: --${m[1]}`);
    }
  }
});

Deno.test({
  name: "try-it: the walk-through ends with the page's machine CONFIGURED on a VM of pve1",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const page = await Deno.readTextFile(PAGE);
    const sh = shLines(page);
    const id = sh.find((l) => l.startsWith("ID="))!.slice(3);
    const serve = sh.find((l) => l.startsWith("bigfleet-proxmox $PVESIM_FLAGS --provider="))!;
    const own = serve.split(/\s+/).slice(2);

    const sim = await spawnStandalone(["--port=0"]);
    const dir = await Deno.makeTempDir({ prefix: "bf-try-it-" });
    let proc;
    try {
      const flags = sim.flags;
      // As the page runs it, with the state in a scratch folder and no metrics port to collide.
      const args = [
        ...flags,
        ...own.map((a) => a.startsWith("--state=") ? `--state=${dir}/try.kv` : a),
        "--metrics-addr=",
      ];
      proc = await startProvider({ args, readyTimeoutMs: 60_000 });
      const h = new Harness(proc.addr);
      try {
        const ids = (await h.list()).machines.map((m) => m.id);
        assert.equal(ids.length, 4, ids.join(" "));
        assert.ok(ids.includes(id), `${id} is one of ${ids.join(" ")}`);
        const grpcurl = await findGrpcurl();
        const calls = sh.filter((l) => l.startsWith("$GRPCURL "));
        assert.deepEqual(calls.map((l) => l.split(" ").at(-1)), [
          "bigfleet.v1alpha1.CapacityProvider/Create",
          "bigfleet.v1alpha1.CapacityProvider/Configure",
        ]);
        // The page's own lines, in bash, against this provider's port.
        const run = async (call: string) => {
          const script = [
            ...sh.filter((l) => /^(ID|BLOB|GRPCURL)=/.test(l)),
            call.replace("127.0.0.1:9000", proc!.addr),
          ].join("\n");
          const out = await new Deno.Command("bash", {
            args: ["-c", script],
            cwd: REPO_ROOT,
            env: {
              PATH: `${grpcurl!.slice(0, grpcurl!.lastIndexOf("/"))}:${Deno.env.get("PATH")}`,
            },
            stdout: "piped",
            stderr: "piped",
          }).output();
          assert.ok(out.success, new TextDecoder().decode(out.stderr));
        };
        if (grpcurl === null) {
          console.log(
            "skip: grpcurl is not installed; the page's two calls are made by the test's client",
          );
          await h.create(id);
        } else await run(calls[0]);
        await h.mustReach(id, MachineState.IDLE);
        if (grpcurl === null) {
          const blob = new TextEncoder().encode("#!/bin/sh\necho joining cluster try\n");
          await h.configure(id, "try", undefined, undefined, blob);
        } else await run(calls[1]);
        await h.mustReach(id, MachineState.CONFIGURED);
      } finally {
        h.close();
      }
      const got = await cli(["machines", "get", id, `--target=${proc.addr}`]);
      assert.equal(got.code, 0, got.stderr);
      const row = lines(got.stdout)[1].split(/ {2,}/);
      assert.deepEqual([row[0], row[1], row[3], row[5]], [id, "CONFIGURED", "pve1", "try"]);
      assert.match(row[4], /^pve1\/\d+$/);
      assert.match(
        proc.stderr(),
        /INFO {2}bigfleet\.kit: configure of \S+ landed CONFIGURED after/,
      );
    } finally {
      await proc?.stop();
      sim.child.kill("SIGTERM");
      await sim.child.status;
      await Deno.remove(dir, { recursive: true });
    }
  },
});
