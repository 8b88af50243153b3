// `smoke` through the real entrypoint against the Proxmox API simulator: one
// machine through Create, Configure (the blob reaches the guest's hook),
// Drain and Delete with each step and its duration printed, the VM gone at
// the end; a failing step prints its last_error and fix and still leaves no
// VM; a state another process holds is refused before anything is created.

import assert from "node:assert/strict";
import { lockState } from "../../src/store/state_lock.ts";
import { type Simulator, startSimulator } from "../pvesim/mod.ts";
import { providerArgs } from "../proxmox/helpers.ts";
import { cli, type CliResult, lines } from "./helpers.ts";

const BLOB = "#!/bin/sh\necho joining cluster smoke-test\n";

interface Rig {
  sim: Simulator;
  dir: string;
  run(extra?: string[]): Promise<CliResult>;
}

async function withRig(fn: (r: Rig) => Promise<void>): Promise<void> {
  const sim = await startSimulator({});
  const dir = await Deno.makeTempDir({ prefix: "bf-smoke-" });
  const tokenFile = `${dir}/token`;
  await Deno.writeTextFile(tokenFile, sim.tokenSecret + "\n");
  await Deno.writeTextFile(`${dir}/blob.sh`, BLOB);
  const run = (extra: string[] = []) =>
    cli(["smoke", ...providerArgs(sim, tokenFile), `--bootstrap-file=${dir}/blob.sh`, ...extra], {
      timeoutMs: 90_000,
    });
  try {
    await fn({ sim, dir, run });
  } finally {
    await sim.close();
    await Deno.remove(dir, { recursive: true });
  }
}

/** `PASS  create  1.2s  …` → [status, step, seconds, text]. */
function steps(stdout: string): [string, string, number, string][] {
  return lines(stdout).flatMap((l) => {
    const m = /^(PASS|FAIL) {2}(\S+) +(\d+\.\d)s {2}(.*)$/.exec(l);
    return m ? [[m[1], m[2], Number(m[3]), m[4]] as [string, string, number, string]] : [];
  });
}

Deno.test({
  name:
    "smoke: one machine through Create, Configure, Drain and Delete, each step timed, the VM gone",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withRig(async ({ sim, run }) => {
      const r = await run();
      assert.equal(r.code, 0, `${r.stdout}\n${r.stderr}`);
      const head = lines(r.stdout)[0];
      assert.match(
        head,
        /^smoke: machine pve-test\/smoke\/pve\.large\/pve1\/\w+ \(pve\.large in zone pve1\), shard smoke-\S+$/,
      );
      const got = steps(r.stdout);
      assert.deepEqual(got.map(([s, step]) => `${s} ${step}`), [
        "PASS create",
        "PASS configure",
        "PASS drain",
        "PASS delete",
        "PASS gone",
      ]);
      assert.match(got[0][3], /^IDLE, VM pve1\/\d+$/);
      assert.match(lines(r.stdout).at(-1)!, /^smoke passed in \d+\.\ds$/);
      // What the cluster saw: one clone that ran the blob and was drained, then destroyed.
      assert.deepEqual(sim.vms().filter((vm) => !vm.config.template), [], "no VM is left");
      const methods = sim.requests.map((q) => `${q.method} ${q.path}`);
      assert.equal(methods.filter((m) => /^POST .*\/clone$/.test(m)).length, 1);
      assert.equal(methods.filter((m) => /^DELETE \/nodes\/pve1\/qemu\/\d+$/.test(m)).length, 1);
      assert.ok(
        methods.some((m) => m.endsWith("/agent/file-write")),
        "the blob went to the guest",
      );
      assert.ok(!r.stdout.includes(sim.tokenSecret) && !r.stderr.includes(sim.tokenSecret));
    });
  },
});

Deno.test({
  name: "smoke: a failing step prints its last_error and the fix, and the VM is destroyed",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withRig(async ({ sim, run }) => {
      sim.faults.bootstrapExitCode = 3;
      const r = await run();
      assert.equal(r.code, 1, `${r.stdout}\n${r.stderr}`);
      const got = steps(r.stdout);
      assert.deepEqual(got.map(([s, step]) => `${s} ${step}`), ["PASS create", "FAIL configure"]);
      assert.match(got[1][3], /^configure failed: .*3/, "the machine's last_error");
      const out = lines(r.stdout);
      assert.match(out.find((l) => l.trim().startsWith("fix:"))!, /bootstrap hook/);
      assert.ok(out.some((l) => /^cleanup: VM pve1\/\d+ destroyed$/.test(l)), r.stdout);
      assert.equal(out.at(-1), "smoke FAILED at configure");
      assert.deepEqual(sim.vms().filter((vm) => !vm.config.template), [], "no VM is left");
    });
  },
});

Deno.test({
  name: "smoke: refused while a provider holds the state; usage errors exit 2",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    await withRig(async ({ sim, dir, run }) => {
      const state = `${dir}/state.kv`;
      const lock = await lockState(state);
      try {
        const r = await run([`--state=${state}`]);
        assert.equal(r.code, 1, r.stderr);
        assert.equal(r.stdout, "");
        assert.deepEqual(lines(r.stderr).length, 1, r.stderr);
        assert.match(
          r.stderr,
          new RegExp(
            `^error: --state "${state}": in use by another provider: pid ${Deno.pid} .*; smoke runs only while no provider serves on this state`,
          ),
        );
      } finally {
        lock.release();
      }
      assert.equal(sim.requests.filter((q) => q.method !== "GET").length, 0, "nothing was changed");
      for (
        const [extra, want] of [
          [["--bootstrap-file="], /^error: --bootstrap-file: is required$/],
          [["--zone=pve9"], /^error: --zone: "pve9" is not one of pve1, pve2$/],
          [
            ["--instance-type=pve.huge"],
            /^error: --instance-type: "pve.huge" is not in the catalog/,
          ],
        ] as const
      ) {
        const r = await run([...extra]);
        assert.equal(r.code, 2, r.stderr);
        assert.match(lines(r.stderr)[0], want);
      }
    });
  },
});
