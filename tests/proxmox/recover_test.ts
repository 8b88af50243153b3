// `machines recover` through the real binary against the Proxmox API simulator
// (docs/troubleshooting.md#machines-failed): a crash leaves four Creates
// FAILED with their VMs running but their guest agents silent. The operator
// destroys one (the slot is usable again), adopts one (IDLE on the same VM,
// then configurable), and is refused, with the reason, for every case the
// command must not act on: an unknown id, a machine that is not FAILED, a
// FAILED Configure, a VM that is stopped, silent, sized for another type or
// missing. Dry runs change nothing; applied ones bump the revision, write an
// audit line and count in bigfleet_proxmox_recoveries_total.

import assert from "node:assert/strict";
import { Harness, MachineState } from "../harness/mod.ts";
import type { Machine } from "../harness/mod.ts";
import { cli, lines } from "../cli/helpers.ts";
import type { CliResult } from "../cli/helpers.ts";
import { logLines, sample, scrape, waitFor } from "../server/helpers.ts";
import { providerRig } from "./helpers.ts";

Deno.test("machines recover: destroy, adopt, and every refusal, through the admin socket", async (t) => {
  await using r = await providerRig({ timing: { cloneMs: 1_500 } });
  const socket = `${r.state}.admin`;
  const recover = (...args: string[]) =>
    cli(["machines", "recover", ...args, `--admin-socket=${socket}`]);

  // ---- a crash while four Creates wait for guest agents that never answer ----
  r.sim.faults.agentDown = true;
  const first = await r.start(["--seed-count=8"]);
  const h1 = new Harness(first.addr);
  const [a, b, c, d, e] = (await h1.pickNSpeculative(5)).map((m) => m.id);
  try {
    for (const id of [a, b, c, d, e]) await h1.create(id);
    await waitFor(
      "five cloned VMs running",
      () =>
        r.sim.vms().filter((v) => !v.template && v.status === "running" && !v.config.lock)
            .length === 5 || undefined,
      20_000,
    );
  } finally {
    h1.close();
    await first.stop(); // SIGKILL
  }
  const vmOf = (id: string) => r.sim.vms().find((v) => v.description?.includes(id))!;

  const p = await r.start(["--seed-count=8", "--reconcile-interval=300ms"]);
  const h = new Harness(p.addr);
  const recoveries = async (action: string, outcome: string) =>
    sample(await scrape(p.metricsPort), "bigfleet_proxmox_recoveries_total", { action, outcome });
  const failedWithHost = async (id: string) =>
    await waitFor(`${id} FAILED with its host`, async () => {
      const m = await h.get(id);
      return m.state === MachineState.FAILED && m.host ? m : undefined;
    });
  try {
    for (const id of [a, b, c, d, e]) {
      const m = await failedWithHost(id);
      assert.equal(m.host?.ref, `${vmOf(id).node}/${vmOf(id).vmid}`);
    }

    await t.step("machines list --state failed -o wide shows the reason and the host", async () => {
      const out = await cli([
        "machines",
        "list",
        "--state=failed",
        "-o",
        "wide",
        `--target=${p.addr}`,
      ]);
      assert.equal(out.code, 0, out.stderr);
      for (const id of [a, b, c, d]) {
        const row = lines(out.stdout).find((l) => l.startsWith(id));
        assert.ok(row, `${id} is listed`);
        assert.ok(row.includes(`${vmOf(id).node}/${vmOf(id).vmid}`), row);
        assert.match(row, /create transition interrupted by a provider restart/);
      }
    });

    await t.step("usage errors and an unknown id", async () => {
      const neither = await recover(a);
      assert.equal(neither.code, 2, neither.stderr);
      assert.match(neither.stderr, /--destroy or --adopt/);
      const both = await recover(a, "--destroy", "--adopt");
      assert.equal(both.code, 2);
      const noSocket = await cli(["machines", "recover", a, "--destroy"], {
        env: { BIGFLEET_ADMIN_SOCKET: "" },
      });
      assert.equal(noSocket.code, 2);
      assert.match(noSocket.stderr, /--admin-socket is required/);
      const unknown = await recover("pve-test/nope", "--destroy", "--yes");
      assert.equal(unknown.code, 3, unknown.stderr);
      assert.match(unknown.stderr, /machine "pve-test\/nope" not found/);
    });

    await t.step("adopt is refused while the guest agent is silent", async () => {
      const out = await recover(b, "--adopt", "--yes");
      refused(out, /guest agent does not answer/);
      assert.equal((await h.get(b)).state, MachineState.FAILED);
      assert.equal(await recoveries("adopt", "refused"), 1);
    });
    r.sim.faults.agentDown = false;

    await t.step(
      "--destroy: a dry run changes nothing, --yes destroys and frees the slot",
      async () => {
        const { revision } = await h.list();
        const vm = vmOf(a);
        const dry = await recover(a, "--destroy");
        assert.equal(dry.code, 0, dry.stderr);
        assert.match(dry.stdout, new RegExp(`would stop and destroy VM ${vm.vmid} on ${vm.node}`));
        assert.match(dry.stdout, /run again with --yes/);
        assert.ok(r.sim.vm(vm.vmid), "the dry run destroyed nothing");
        assert.equal((await h.list({ since_revision: revision })).machines.length, 0);

        const done = await recover(a, "--destroy", "--yes");
        assert.equal(done.code, 0, done.stderr);
        assert.match(done.stdout, /FAILED → SPECULATIVE/);
        assert.equal(r.sim.vm(vm.vmid), undefined, "the VM is gone");
        const m = await h.get(a);
        assert.deepEqual([m.state, m.host ?? null, m.last_error], [
          MachineState.SPECULATIVE,
          null,
          "",
        ]);
        const changed = (await h.list({ since_revision: revision })).machines.map((x) => x.id);
        assert.deepEqual(changed, [a], "the revision moved for it");
        assert.equal(await recoveries("destroy", "ok"), 1);
        audited(p.stderr(), a, "destroy");
        // The slot is in service again.
        await h.create(a);
        await h.mustReach(a, MachineState.IDLE, 20_000);
      },
    );

    await t.step("--adopt: a usable VM of a FAILED Create becomes the IDLE machine", async () => {
      const vm = vmOf(b);
      const dry = await cli(["machines", "recover", b, "--adopt"], {
        env: { BIGFLEET_ADMIN_SOCKET: socket },
      });
      assert.equal(dry.code, 0, dry.stderr);
      assert.match(dry.stdout, new RegExp(`would adopt VM ${vm.vmid} on ${vm.node}: running`));
      assert.equal((await h.get(b)).state, MachineState.FAILED, "the dry run changed nothing");
      const done = await recover(b, "--adopt", "--yes");
      assert.equal(done.code, 0, done.stderr);
      assert.match(done.stdout, /FAILED → IDLE/);
      const m = await h.get(b);
      assert.deepEqual([m.state, m.host?.ref, m.last_error], [
        MachineState.IDLE,
        `${vm.node}/${vm.vmid}`,
        "",
      ]);
      assert.equal(r.sim.vm(vm.vmid)?.stops, 0, "adopted as it ran");
      assert.equal(await recoveries("adopt", "ok"), 1);
      audited(p.stderr(), b, "adopt");
      await h.configure(b, "c1", {});
      await h.mustReach(b, MachineState.CONFIGURED, 20_000);
    });

    await t.step("refused: a machine that is not FAILED", async () => {
      for (const action of ["--adopt", "--destroy"]) {
        refused(await recover(b, action, "--yes"), /is CONFIGURED, not FAILED/);
      }
      assert.equal((await h.get(b)).state, MachineState.CONFIGURED);
    });

    await t.step("refused: adopting a stopped VM, or one sized for another type", async () => {
      r.sim.stopVmOutOfBand(vmOf(c).vmid);
      refused(await recover(c, "--adopt", "--yes"), /is stopped, not running/);
      r.sim.editConfig(vmOf(d).vmid, { cores: 1 });
      refused(await recover(d, "--adopt", "--yes"), /has 1 vCPU \/ \d+ MiB, pve\.\w+ is/);
      for (const id of [c, d]) assert.equal((await h.get(id)).state, MachineState.FAILED);
      // --destroy takes them whatever their VM is like.
      for (const id of [c, d]) {
        const vmid = vmOf(id).vmid;
        assert.equal((await recover(id, "--destroy", "--yes")).code, 0);
        assert.equal(r.sim.vm(vmid), undefined);
        assert.equal((await h.get(id)).state, MachineState.SPECULATIVE);
      }
    });

    await t.step(
      "refused: adopting a running VM whose right size is only pending (GET config shows it applied)",
      async () => {
        const vm = vmOf(e);
        const right = Number(vm.config.cores);
        // It runs with 1 core; an operator's `qm set --cores` on the running VM stays pending.
        r.sim.editConfig(vm.vmid, { cores: 1 });
        const client = Deno.createHttpClient({ caCerts: [r.sim.caPem] });
        const put = await fetch(`${r.sim.url}/nodes/${vm.node}/qemu/${vm.vmid}/config`, {
          method: "PUT",
          headers: { Authorization: r.sim.authHeader, "Content-Type": "application/json" },
          body: JSON.stringify({ cores: right }),
          client,
        });
        assert.equal(put.status, 200, await put.text());
        client.close();
        assert.equal(r.sim.vm(vm.vmid)!.pending.cores, right, "pending until the next start");
        refused(await recover(e, "--adopt", "--yes"), /has 1 vCPU \/ \d+ MiB, pve\.\w+ is/);
        assert.equal((await h.get(e)).state, MachineState.FAILED);
        assert.equal((await recover(e, "--destroy", "--yes")).code, 0);
      },
    );

    await t.step("refused: adopting a FAILED Configure; --destroy frees it", async () => {
      const w = await h.walkToIdle();
      r.sim.faults.bootstrapExitCode = 3;
      await h.configure(w.id, "c2", {});
      await h.mustReach(w.id, MachineState.FAILED, 20_000);
      r.sim.faults.bootstrapExitCode = 0;
      refused(await recover(w.id, "--adopt", "--yes"), /only a FAILED Create can be adopted/);
      const vmid = vmOf(w.id).vmid;
      assert.equal((await recover(w.id, "--destroy", "--yes")).code, 0);
      assert.equal(r.sim.vm(vmid), undefined);
      const m = await h.get(w.id);
      assert.deepEqual([m.state, m.cluster], [MachineState.SPECULATIVE, ""], "binding cleared");
    });

    await t.step(
      "refused: adopting a FAILED Create without a VM; --destroy frees the slot",
      async () => {
        r.sim.faults.taskError = { qmclone: "no space left on device" };
        const id = (await h.pickSpeculative()).id;
        await h.create(id);
        const m: Machine = await h.mustReach(id, MachineState.FAILED, 20_000);
        r.sim.faults.taskError = {};
        assert.equal(m.host ?? null, null);
        refused(await recover(id, "--adopt", "--yes"), /no VM carries its marker/);
        const done = await recover(id, "--destroy", "--yes");
        assert.equal(done.code, 0, done.stderr);
        assert.match(done.stdout, /nothing to destroy/);
        assert.equal((await h.get(id)).state, MachineState.SPECULATIVE);
      },
    );

    const s = await scrape(p.metricsPort);
    assert.equal(sample(s, "bigfleet_proxmox_failed_machines", { host: "known" }), 0);
    assert.equal(sample(s, "bigfleet_proxmox_failed_machines", { host: "unknown" }), 0);
  } finally {
    h.close();
    await p.stop();
  }
});

function refused(out: CliResult, why: RegExp): void {
  assert.equal(out.code, 1, `refused with exit 1: ${out.stdout}${out.stderr}`);
  assert.match(out.stderr, why);
  assert.equal(out.stdout, "", "nothing reported as done");
}

/** The provider's audit line for an applied recovery. */
function audited(stderr: string, id: string, action: string): void {
  const hit = logLines(stderr).find((l) =>
    l.audit === true && l.machineId === id && l.action === action && l.to !== undefined
  );
  assert.ok(hit, `an audit line for ${action} of ${id}`);
  assert.equal(hit.was, "create transition interrupted by a provider restart; needs re-drive");
}
