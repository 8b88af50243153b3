// docs/try-it.md, followed: the standalone simulator (`deno task pvesim`'s
// command), the provider started with the flags it prints and the page's
// own flags, the page's machine walked to CONFIGURED with the page's Create
// and Configure (the calls its grpcurl lines make), and `machines get`
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
        await h.create(id);
        await h.mustReach(id, MachineState.IDLE);
        const blob = new TextEncoder().encode("#!/bin/sh\necho joining cluster try\n");
        await h.configure(id, "try", undefined, undefined, blob);
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
