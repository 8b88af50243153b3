// The real backend through the real provider process: gRPC in, HTTPS to the
// Proxmox API simulator out. Covers what only shows end to end: failures
// surfacing as FAILED with a useful last_error, startup refusal on bad trust
// material, secrets absent from logs and the state store, inventory rebuilt
// from the cluster without a state file, and a reconcile loop that leaves the
// revision alone.

import assert from "node:assert/strict";
import { freePort, Harness, MachineState, servingLine, startProvider } from "../harness/mod.ts";
import { sample, scrape, waitFor as pollFor } from "../server/helpers.ts";
import type { ProviderProcess } from "../harness/mod.ts";
import { startSimulator } from "../pvesim/mod.ts";
import type { Simulator } from "../pvesim/mod.ts";

interface Rig {
  sim: Simulator;
  dir: string;
  tokenFile: string;
  args(extra?: string[]): string[];
  close(): Promise<void>;
}

async function rig(): Promise<Rig> {
  const sim = await startSimulator({ nodes: ["pve1", "pve2"] });
  const dir = await Deno.makeTempDir({ prefix: "bf-pve-proc-" });
  const tokenFile = `${dir}/token`;
  await Deno.writeTextFile(tokenFile, sim.tokenSecret);
  return {
    sim,
    dir,
    tokenFile,
    args: (extra = []) => [
      "--provider=pve-test",
      `--proxmox-api-url=${sim.url}`,
      `--proxmox-token-id=${sim.tokenId}`,
      `--proxmox-token-file=${tokenFile}`,
      "--nodes=pve1,pve2",
      "--proxmox-pool=bigfleet",
      "--seed-count=8",
      "--metrics-addr=",
      ...(extra.some((a) => a.startsWith("--proxmox-ca-file") || a.startsWith("--proxmox-tls"))
        ? []
        : [`--proxmox-ca-file=${sim.caFile}`]),
      ...extra,
    ],
    async close() {
      await sim.close();
      await Deno.remove(dir, { recursive: true });
    },
  };
}

async function withProvider(
  r: Rig,
  extra: string[],
  fn: (h: Harness, p: ProviderProcess) => Promise<void>,
): Promise<void> {
  const p = await startProvider({ args: r.args(extra) });
  const h = new Harness(p.addr);
  try {
    await fn(h, p);
  } finally {
    h.close();
    await p.stop();
  }
}

Deno.test({
  name: "real backend: a failing bootstrap hook ends FAILED with its exit code and stderr tail",
  async fn() {
    const r = await rig();
    try {
      await withProvider(r, [], async (h) => {
        const { id } = await h.walkToIdle();
        r.sim.faults.bootstrapExitCode = 3;
        r.sim.faults.bootstrapStderr = "kubeadm join: token expired\n";
        await h.configure(id, "c1", { k: "v" });
        const m = await h.mustReach(id, MachineState.FAILED, 15_000, 25);
        assert.match(m.last_error, /exit(ed| code)?[^0-9]*3/i, m.last_error);
        assert.match(m.last_error, /token expired/);
        assert.equal(m.cluster, "c1", "the binding stays visible on the FAILED machine");
        // FAILED is terminal: a retried Configure is refused without touching it.
        await assert.rejects(
          h.configure(id, "c1", { k: "v" }),
          (e: { code: number }) => e.code !== 9,
        );
      });
    } finally {
      await r.close();
    }
  },
});

Deno.test({
  name: "real backend: Configure reports CONFIGURED only after the hook ran the delivered blob",
  async fn() {
    const r = await rig();
    try {
      await withProvider(r, [], async (h) => {
        const { id, machine } = await h.walkToIdle();
        const blob = new TextEncoder().encode("#!/bin/sh\necho join\n" + "x".repeat(200_000));
        r.sim.faults.bootstrapDelayMs = 600;
        await h.configure(id, "c2", {}, undefined, blob);
        const seen = await h.get(id);
        assert.equal(seen.state, MachineState.CONFIGURING, "still CONFIGURING while the hook runs");
        await h.mustReach(id, MachineState.CONFIGURED);
        const vmid = Number(machine.host!.ref.split("/")[1]);
        const runs = r.sim.vm(vmid)!.bootstrapRuns;
        assert.equal(runs.length, 1);
        assert.deepEqual(runs[0].content, blob, "the guest received the blob byte-exactly");
      });
    } finally {
      await r.close();
    }
  },
});

Deno.test({
  name: "real backend: a wrong CA or fingerprint stops startup with one line, no token sent",
  async fn() {
    const r = await rig();
    try {
      for (
        const trust of [
          [`--proxmox-ca-file=${r.sim.wrongCaFile}`],
          [`--proxmox-tls-fingerprint=${"AB:".repeat(31)}AB`],
          [`--proxmox-ca-file=${r.sim.caFile}`, `--proxmox-tls-fingerprint=${"CD:".repeat(31)}CD`],
        ]
      ) {
        const before = r.sim.requests.length;
        const cmd = new Deno.Command(Deno.execPath(), {
          args: [
            "run",
            "--allow-all",
            "--unstable-kv",
            new URL("../../main.ts", import.meta.url).pathname,
            "--addr=127.0.0.1:0",
            ...r.args(trust),
          ],
          stdout: "piped",
          stderr: "piped",
        });
        const out = await cmd.output();
        assert.notEqual(out.code, 0, `${trust}: must not start`);
        const lines = new TextDecoder().decode(out.stderr).split("\n")
          .filter((l) => l.startsWith("error:"));
        assert.equal(lines.length, 1, `${trust}: one error line`);
        assert.match(lines[0], /certificate|fingerprint|TLS|trust/i, lines[0]);
        assert.ok(!lines[0].includes(r.sim.tokenSecret));
        const authed = r.sim.requests.slice(before).filter((q) => q.authenticated);
        assert.equal(authed.length, 0, `${trust}: the simulator saw an authenticated request`);
      }
    } finally {
      await r.close();
    }
  },
});

Deno.test({
  name: "real backend: the token secret and the blob never reach logs or the state store",
  async fn() {
    const r = await rig();
    const marker = `BOOTSTRAP-SECRET-${crypto.randomUUID()}`;
    const state = `${r.dir}/state.kv`;
    try {
      let log = "";
      await withProvider(r, [`--state=${state}`], async (h, p) => {
        const { id } = await h.walkToIdle();
        r.sim.faults.bootstrapExitCode = 1;
        r.sim.faults.bootstrapStderr = "failed\n";
        await h.configure(id, "c3", {}, undefined, new TextEncoder().encode(marker));
        await h.mustReach(id, MachineState.FAILED, 15_000, 25);
        log = p.stderr();
      });
      assert.ok(servingLine(log) !== undefined, "the log was captured");
      assert.ok(!log.includes(r.sim.tokenSecret), "token secret in the log");
      assert.ok(!log.includes(marker), "bootstrap blob in the log");
      let stored = "";
      for await (const e of Deno.readDir(r.dir)) {
        // The store's files; the admin socket beside them is not one.
        if (e.isFile && e.name.startsWith("state.kv")) {
          stored += new TextDecoder("latin1").decode(await Deno.readFile(`${r.dir}/${e.name}`));
        }
      }
      assert.ok(stored.length > 0, "the state store was written");
      assert.ok(!stored.includes(r.sim.tokenSecret), "token secret in the state store");
      assert.ok(!stored.includes(marker), "bootstrap blob in the state store");
    } finally {
      await r.close();
    }
  },
});

Deno.test({
  name:
    "real backend: without a state file the inventory is rebuilt from the cluster, orphans surfaced",
  async fn() {
    const r = await rig();
    try {
      const made = new Map<string, string>();
      await withProvider(r, [], async (h) => {
        for (let i = 0; i < 2; i++) {
          const w = await h.walkToIdle();
          made.set(w.id, w.machine.host!.ref);
        }
      });
      // A VM this provider tagged but that matches no slot (e.g. offerings shrank).
      r.sim.addVm({
        vmid: 4242,
        node: "pve2",
        name: "bigfleet-gone-slot",
        tags: "bigfleet",
        description:
          'BigFleet managed VM.\nbigfleet-marker: {"machine_id":"pve-test/OnDemand/pve.old/pve2/000","operation_id":"op-x"}',
        template: false,
        running: true,
      });
      const metricsPort = freePort();
      const reconcile = ["--reconcile-interval=200ms", `--metrics-addr=127.0.0.1:${metricsPort}`];
      await withProvider(r, reconcile, async (h) => {
        const list = await h.client.list({});
        for (const [id, ref] of made) {
          const m = list.machines.find((x) => x.id === id);
          assert.ok(m, `${id} is listed again`);
          assert.equal(m.state, MachineState.IDLE);
          assert.equal(m.host?.ref, ref, "mapped back to the same VM");
        }
        const orphan = list.machines.find((x) => x.id === "pve-test/OnDemand/pve.old/pve2/000");
        assert.ok(orphan, "the orphan is surfaced");
        assert.equal(orphan.state, MachineState.IDLE);
        assert.equal(orphan.host?.ref, "pve2/4242");
        assert.equal(list.machines.filter((x) => x.state === MachineState.SPECULATIVE).length, 6);

        // The reconcile loop runs every 200 ms; with nothing changing, the
        // revision must not move. Two passes that completed (a pass that runs
        // out of its 200 ms budget counts as an error and changes nothing)
        // after the cursor was taken prove at least one ran entirely after it.
        const rev = list.revision;
        const passes = async () =>
          sample(await scrape(metricsPort), "bigfleet_proxmox_reconcile_total", { outcome: "ok" });
        const ok0 = await passes();
        await pollFor("two reconcile passes", async () => await passes() >= ok0 + 2 || undefined);
        const again = await h.client.list({ since_revision: rev });
        assert.equal(
          again.machines.length,
          0,
          "reconcile bumped the revision with nothing changed",
        );

        // The orphan can be deleted; then it leaves the inventory and the cluster.
        await h.client.delete({ machine_id: orphan.id });
        await pollFor(
          "the orphan to leave the inventory",
          async () => !(await h.client.list({})).machines.some((x) => x.id === orphan.id),
          15_000,
          50,
        );
        assert.equal(r.sim.vm(4242), undefined, "the orphan VM was destroyed");
      });
    } finally {
      await r.close();
    }
  },
});
