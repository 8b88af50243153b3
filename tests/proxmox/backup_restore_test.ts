// State backup and restore through the real binary against the Proxmox API
// simulator (docs/install.md#backup-and-restore). `state backup` takes a copy
// from the running provider while Creates run; after it, a machine is
// created (its VM is newer than the copy) and another deleted. The provider
// is stopped, the copy restored in place of the state file, and started
// again: the copy's machines and fence marks are back, the machine created
// after the copy rejoins its slot IDLE on its VM (never a second VM), and a
// VM whose marker names a machine the copy does not know becomes an orphan.

import assert from "node:assert/strict";
import { Harness, MachineState } from "../harness/mod.ts";
import { cli } from "../cli/helpers.ts";
import { waitFor } from "../server/helpers.ts";
import { providerRig } from "./helpers.ts";

const SHARD = "shard-a";
const token = (seq: number) => ({ shard: SHARD, epoch: 1n, seq: BigInt(seq) });

Deno.test("state backup and restore: a consistent online copy; newer VMs rejoin their slots or become orphans", async () => {
  await using r = await providerRig({ timing: { cloneMs: 400 } });
  const socket = `${r.state}.admin`;
  const backup = `${r.dir}/backup.kv`;
  const backupCli = (file: string) => cli(["state", "backup", file, `--admin-socket=${socket}`]);

  const p = await r.start(["--seed-count=8"]);
  const h = new Harness(p.addr);
  let kept = "", later = "", deleted = "", copied = "";
  let backupRevision = 0;
  /** The shard's List cursor from after the copy was taken. */
  let cursor: Uint8Array = new Uint8Array();
  try {
    [kept, deleted, later] = (await h.pickNSpeculative(3)).map((m) => m.id);
    await h.create(kept, token(1));
    await h.create(deleted, token(2));
    for (const id of [kept, deleted]) await h.mustReach(id, MachineState.IDLE, 20_000);

    // Online: the copy is taken while two more Creates run (held at their guest agents).
    r.sim.faults.agentDown = true;
    const busy = (await h.pickNSpeculative(5)).filter((m) => m.id !== later).slice(0, 2);
    await Promise.all(busy.map((m) => h.create(m.id)));
    const out = await backupCli(backup);
    assert.equal(out.code, 0, out.stderr);
    const summary = /state backup: (\d+) machines, (\d+) fence marks, revision (\d+): (\d+) bytes/
      .exec(out.stderr);
    assert.ok(summary, out.stderr);
    assert.equal(Number(summary[1]), 8, "every machine of --seed-count=8");
    assert.equal(Number(summary[2]), 2, "both fence marks");
    backupRevision = Number(summary[3]);
    assert.equal((await Deno.stat(backup)).size, Number(summary[4]));
    assert.equal((await Deno.stat(backup)).mode! & 0o777, 0o600);
    const again = await backupCli(backup);
    assert.equal(again.code, 2, "an existing file is never overwritten");
    const stdout = await backupCli("-");
    assert.equal(stdout.code, 0, stdout.stderr);
    assert.ok(stdout.stdout.length > 0, "- writes the copy to stdout");

    // After the copy: a new VM for `later`, and `deleted`'s VM destroyed.
    r.sim.faults.agentDown = false;
    for (const m of busy) await h.mustReach(m.id, MachineState.IDLE, 20_000);
    await h.create(later, token(3));
    await h.mustReach(later, MachineState.IDLE, 20_000);
    await h.delete(deleted, token(4));
    await h.mustReach(deleted, MachineState.SPECULATIVE, 20_000);
    copied = busy[0].id;
    cursor = (await h.list()).revision;
  } finally {
    h.close();
    p.kill("SIGTERM");
    assert.equal((await p.exited).code, 0, p.stderr());
  }
  const laterVm = r.sim.vms().find((v) => v.description?.includes(later))!;
  // A VM whose marker the copy cannot know (another slot set wrote it, say).
  r.sim.addVm({
    vmid: 4242,
    node: "pve2",
    name: "bigfleet-unknown",
    tags: "bigfleet",
    description:
      'BigFleet managed VM.\nbigfleet-marker: {"machine_id":"pve-test/OnDemand/pve.old/pve2/000","operation_id":"op-x"}',
    template: false,
    running: true,
  });

  // Restore with the provider stopped: the copy replaces the state file and its -wal/-shm.
  for (const suffix of ["", "-wal", "-shm"]) await Deno.remove(r.state + suffix).catch(() => {});
  await Deno.copyFile(backup, r.state);

  const q = await r.start(["--seed-count=8", "--reconcile-interval=300ms"]);
  const h2 = new Harness(q.addr);
  try {
    const list = await h2.list();
    assert.ok(Number(new TextDecoder().decode(list.revision)) > backupRevision);
    // A cursor from after the copy is older than the restored revision: it gets the whole fleet.
    // (A reconcile may add the orphan between the two Lists: every machine of the first is asked.)
    const delta = await h2.list({ since_revision: cursor });
    const seen = new Set(delta.machines.map((m) => m.id));
    assert.deepEqual(
      list.machines.map((m) => m.id).filter((id) => !seen.has(id)),
      [],
      "a newer cursor sees everything",
    );
    const byId = new Map(list.machines.map((m) => [m.id, m]));
    assert.equal(byId.get(kept)?.state, MachineState.IDLE, "as in the copy");
    // In the copy `copied` was CREATING: like any interrupted transition it comes back FAILED
    // (and its VM, made since, is shown on it: docs/troubleshooting.md#machines-failed).
    assert.equal(byId.get(copied)?.state, MachineState.FAILED);
    assert.match(byId.get(copied)!.last_error, /create transition interrupted/);
    // `deleted` was IDLE in the copy; its VM is gone since: it shows the old host.
    assert.equal(byId.get(deleted)?.state, MachineState.IDLE);

    // The machine made after the copy rejoins its slot on its VM, IDLE.
    const rejoined = await waitFor("the newer VM rejoins its slot", async () => {
      const m = await h2.get(later);
      return m.state === MachineState.IDLE ? m : undefined;
    });
    assert.equal(rejoined.host?.ref, `${laterVm.node}/${laterVm.vmid}`);
    const orphan = await waitFor(
      "the unknown VM as an orphan",
      async () => (await h2.list()).machines.find((m) => m.host?.ref === "pve2/4242"),
    );
    assert.equal(orphan.id, "pve-test/OnDemand/pve.old/pve2/000");
    assert.equal(orphan.state, MachineState.IDLE);
    // Never duplicates: one machine per VM, one VM per machine.
    const all = (await h2.list()).machines;
    const refs = all.filter((m) => m.host).map((m) => m.host!.ref);
    assert.equal(new Set(refs).size, refs.length, "no VM listed twice");
    assert.equal(r.sim.vms().filter((v) => v.description?.includes(later)).length, 1);

    // The copy's fence marks hold: a token not newer than the copied mark is refused.
    const stale = await h2.fenced("delete", kept, token(1));
    assert.equal(stale.ok, false);
    assert.equal(!stale.ok && stale.code, 9, "FAILED_PRECONDITION");
  } finally {
    h2.close();
    await q.stop();
  }
});
