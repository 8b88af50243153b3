// Real-PVE facts: what PVE (8.4 or 9.x) itself does in the situations the backend has
// to handle on real clusters, recorded against the real code so that
// tests/pvesim's models can be checked against them (docs/proxmox-notes.md
// "Simulator and real PVE"). None starts a guest; the clones use VMIDs
// 7100-7199 and are removed, template 9101 (a disk with data) is kept (the
// lane owns the rig outside 5000-6999).

import assert from "node:assert/strict";
import { laneIdentity, until, withTagPolicy } from "./lane.ts";
import {
  api,
  destroyVm,
  exec,
  laneTest,
  packageAtLeast,
  rig,
  RigApiError,
  run,
  taskLog,
  vmids,
  waitTask,
} from "./rig.ts";
import { laneTemplate, TEMPLATE_VMID } from "./template.ts";

type Token = { id: string; secret: string };

/** Free VMIDs in the facts range (leftovers of an interrupted run are removed first). */
async function freeVmids(n: number): Promise<number[]> {
  await laneTemplate();
  const taken = new Set(await vmids());
  const out: number[] = [];
  for (let id = 7100; id < 7200 && out.length < n; id++) {
    if (taken.has(id)) await destroyVm(id);
    out.push(id);
  }
  return out;
}

async function clone(
  newid: number,
  extra: Record<string, string | number> = {},
  token?: Token,
  from = TEMPLATE_VMID,
) {
  const r = await rig();
  return await api<string>(
    "POST",
    `/nodes/${r.node}/qemu/${from}/clone`,
    { newid, full: 1, name: `fact-${newid}`, ...extra },
    token,
  );
}

/**
 * A template whose disk holds 128 MiB of data, so a full clone's first disk
 * copy takes long enough to watch (an empty qcow2 copies in a blink on an
 * idle machine). Made once per rig, as VM 9101.
 */
const DATA_TEMPLATE = 9101;
async function dataTemplate(): Promise<number> {
  const cfg = await exec(["qm", "config", String(DATA_TEMPLATE)]);
  if (cfg.code === 0 && /^template: 1$/m.test(cfg.stdout)) return DATA_TEMPLATE;
  if (cfg.code === 0) await run("qm", "destroy", String(DATA_TEMPLATE), "--purge", "1");
  const id = String(DATA_TEMPLATE);
  await run("qm", "create", id, "--name", "bigfleet-lane-facts", "--scsi0", "local:1,format=raw");
  await run(
    "dd",
    "if=/dev/urandom",
    `of=/var/lib/vz/images/${id}/vm-${id}-disk-0.raw`,
    "bs=1M",
    "count=128",
    "conv=notrunc",
    "status=none",
  );
  await run("qm", "template", id);
  return DATA_TEMPLATE;
}

async function tokenOf(mode: "default" | "no-audit-all-vms"): Promise<Token & { pool: string }> {
  const id = await laneIdentity(mode);
  return { id: id.tokenId, secret: id.secret, pool: id.pool };
}

laneTest(
  "fact: your own clone's first phase is the temporary config (description ' qmclone temporary file', lock clone, digest)",
  async () => {
    const r = await rig();
    const [vmid] = await freeVmids(1);
    const upid = await clone(vmid, {}, undefined, await dataTemplate());
    try {
      const seen: Record<string, unknown>[] = [];
      for (let i = 0; i < 2000; i++) {
        try {
          const c = await api<Record<string, unknown>>(
            "GET",
            `/nodes/${r.node}/qemu/${vmid}/config`,
          );
          seen.push(c);
          if (c.name !== undefined && c.lock === undefined) break;
        } catch (err) {
          // Before the worker writes the file: no config at all.
          if (!(err instanceof RigApiError && /does not exist/.test(err.text))) throw err;
        }
      }
      const first = seen[0];
      assert.deepEqual(
        Object.keys(first).sort(),
        ["description", "digest", "lock"],
        JSON.stringify(first),
      );
      assert.equal(first.description, " qmclone temporary file");
      assert.equal(first.lock, "clone");
      assert.match(String(first.digest), /^[0-9a-f]{40}$/);
      const last = seen.at(-1)!;
      assert.equal(last.name, `fact-${vmid}`, "then the full config, unlocked");
      assert.equal(await waitTask(upid), "OK");
    } finally {
      await destroyVm(vmid);
    }
  },
);

laneTest(
  "fact: a disk destroy cannot free is only logged ('Could not remove disk …, check manually'; qemu-server 9.1.19 and later prefix 'WARN: ' and end the task 'WARNINGS: n', PVE 8 ends it OK): the VM is gone, the volume stays",
  async () => {
    const r = await rig();
    const [vmid] = await freeVmids(1);
    assert.equal(await waitTask(await clone(vmid)), "OK");
    const volid = `local:${vmid}/vm-${vmid}-disk-0.qcow2`;
    const file = `/var/lib/vz/images/${vmid}/vm-${vmid}-disk-0.qcow2`;
    // An undeletable disk, as an RBD image still watched or an LV still open is.
    await run("chattr", "+i", file);
    try {
      const upid = await api<string>("DELETE", `/nodes/${r.node}/qemu/${vmid}`, {
        purge: 1,
        "destroy-unreferenced-disks": 1,
      });
      // qemu-server 8.4's destroy_vm warns with Perl's warn, which the task does not count;
      // 9.1.19 and later log_warn, which prefixes 'WARN: ' and counts each line.
      const warns = await packageAtLeast("qemu-server", "9.1.19");
      const exit = await waitTask(upid);
      if (warns) assert.match(exit, /^WARNINGS: [1-9]\d*$/);
      else assert.equal(exit, "OK");
      const log = (await taskLog(upid)).join("\n");
      assert.match(
        log,
        new RegExp(
          `^${warns ? "WARN: " : ""}Could not remove disk '${volid}', check manually: ` +
            "unlink .* Operation not permitted",
          "m",
        ),
      );
      await assert.rejects(
        api("GET", `/nodes/${r.node}/qemu/${vmid}/config`),
        (e) => e instanceof RigApiError && /does not exist/.test(e.text),
      );
      const left = await api<{ volid: string }[]>(
        "GET",
        `/nodes/${r.node}/storage/local/content`,
        { vmid },
      );
      assert.deepEqual(left.map((v) => v.volid), [volid], "the disk leaked");
    } finally {
      await exec(["chattr", "-i", file]);
      await exec(["pvesm", "free", volid]);
    }
  },
);

laneTest(
  "fact: destroy of a VM whose disk is already gone ends OK (not 'WARNINGS: 1'), logging that the image does not exist",
  async () => {
    const r = await rig();
    const [vmid] = await freeVmids(1);
    assert.equal(await waitTask(await clone(vmid)), "OK");
    await run("pvesm", "free", `local:${vmid}/vm-${vmid}-disk-0.qcow2`);
    const upid = await api<string>("DELETE", `/nodes/${r.node}/qemu/${vmid}`, {
      purge: 1,
      "destroy-unreferenced-disks": 1,
    });
    assert.equal(await waitTask(upid), "OK");
    assert.match(
      (await taskLog(upid)).join("\n"),
      new RegExp(
        `disk image '/var/lib/vz/images/${vmid}/vm-${vmid}-disk-0\\.qcow2' does not exist`,
      ),
    );
    await assert.rejects(
      api("GET", `/nodes/${r.node}/qemu/${vmid}/config`),
      (e) => e instanceof RigApiError && /does not exist/.test(e.text),
    );
  },
);

laneTest(
  "fact: after destroying its VM, a pool-only token (--no-audit-all-vms) gets 403 on the VMID, a /vms auditor 'does not exist'",
  async () => {
    const r = await rig();
    const [vmid] = await freeVmids(1);
    const pooled = await tokenOf("no-audit-all-vms");
    const auditor = await tokenOf("default");
    assert.equal(await waitTask(await clone(vmid, { pool: pooled.pool }, pooled)), "OK");
    const path = `/nodes/${r.node}/qemu/${vmid}`;
    try {
      const cfg = await api<Record<string, unknown>>("GET", `${path}/config`, {}, pooled);
      assert.equal(cfg.name, `fact-${vmid}`, "readable while in the pool");
      assert.equal(await waitTask(await api<string>("DELETE", path, { purge: 1 }, pooled)), "OK");
      await assert.rejects(api("GET", `${path}/config`, {}, pooled), (e) => {
        assert.ok(e instanceof RigApiError);
        assert.equal(e.status, 403);
        assert.match(e.text, new RegExp(`Permission check failed \\(/vms/${vmid}, VM\\.Audit\\)`));
        return true;
      });
      await assert.rejects(api("GET", `${path}/config`, {}, auditor), (e) => {
        assert.ok(e instanceof RigApiError);
        assert.equal(e.status, 500);
        assert.match(e.text, new RegExp(`qemu-server/${vmid}\\.conf' does not exist`));
        return true;
      });
    } finally {
      await destroyVm(vmid);
    }
  },
);

laneTest(
  "fact: under user-tag-access user-allow=list a token without Sys.Modify may set only the listed tags",
  async () => {
    const r = await rig();
    const [vmid] = await freeVmids(1);
    const tok = await tokenOf("default");
    assert.equal(await waitTask(await clone(vmid, { pool: tok.pool }, tok)), "OK");
    const path = `/nodes/${r.node}/qemu/${vmid}/config`;
    await withTagPolicy("user-allow=list,user-allow-list=bigfleet", async () => {
      await api("PUT", path, { tags: "bigfleet" }, tok);
      await assert.rejects(api("PUT", path, { tags: "bigfleet;bigfleet-lane-x" }, tok), (e) => {
        assert.ok(e instanceof RigApiError);
        assert.equal(e.status, 403);
        assert.match(
          e.text,
          /Permission check failed \(\/, Sys\.Modify for modifying tag 'bigfleet-lane-x'\)/,
        );
        return true;
      });
      // Removing a tag is a change of that tag, checked the same way.
      await run("qm", "set", String(vmid), "--tags", "bigfleet;from-template");
      await assert.rejects(
        api("PUT", path, { tags: "bigfleet" }, tok),
        /modifying tag 'from-template'/,
      );
    });
    // The default policy (free): any tag.
    await api("PUT", path, { tags: "bigfleet;bigfleet-lane-x" }, tok);
    await destroyVm(vmid);
  },
);

laneTest(
  "fact: parallel full clones of one template onto one dir storage all succeed (its lock is held only to allocate)",
  async () => {
    const ids = await freeVmids(3);
    try {
      const upids = await Promise.all(ids.map((id) => clone(id)));
      const exits = await Promise.all(upids.map((u) => waitTask(u)));
      assert.deepEqual(exits, ["OK", "OK", "OK"]);
    } finally {
      for (const id of ids) await destroyVm(id);
    }
  },
);

laneTest(
  "fact: pvedaemon runs protected calls on 3 workers: of 6 config PUTs blocked on VM locks, 3 time out after 10 s, the rest wait for a worker first (or get 596)",
  async () => {
    const r = await rig();
    const ids = await freeVmids(6);
    try {
      for (const u of await Promise.all(ids.map((id) => clone(id)))) {
        assert.equal(await waitTask(u), "OK");
      }
      // Hold every config lock for longer than two of PVE's 10 s lock waits; the
      // holders are bounded by their sleep, so nothing needs killing afterwards.
      const holder = new Deno.Command((await rig()).exec, {
        args: [
          "sh",
          "-c",
          ids.map((id) => `flock -x /var/lock/qemu-server/lock-${id}.conf sleep 28 &`).join(" ") +
          " wait",
        ],
        stdout: "null",
        stderr: "null",
      }).spawn();
      try {
        // Every holder has its lock once a non-blocking flock on each file fails.
        await until(
          async () =>
            (await exec([
              "sh",
              "-c",
              ids.map((id) => `! flock -n /var/lock/qemu-server/lock-${id}.conf true`).join(" && "),
            ])).code === 0,
          10_000,
          "the holders take their locks",
        );
        const t0 = Date.now();
        const done = await Promise.all(ids.map(async (id) => {
          const err = await api("PUT", `/nodes/${r.node}/qemu/${id}/config`, { description: "x" })
            .then(() => null, (e) => e as RigApiError);
          return { s: (Date.now() - t0) / 1000, err };
        }));
        // Three workers each wait out PVE's 10 s lock timeout; calls queued behind
        // them get a worker later (and wait for the lock then) or, as seen on
        // 8.4, come back 596 with an empty body when the first wave ends.
        const lockTimeout =
          /^can't lock file '\/var\/lock\/qemu-server\/lock-\d+\.conf' - got timeout$/;
        const timedOut = (d: (typeof done)[number]) => !!d.err && lockTimeout.test(d.err.text);
        const lost = (d: (typeof done)[number]) => d.err?.status === 596 && d.err.text === "";
        const shown = JSON.stringify(done.map((d) => [d.s, d.err?.status, d.err?.text]));
        const first = done.filter((d) => d.s < 15);
        const later = done.filter((d) => d.s >= 15);
        assert.equal(first.filter(timedOut).length, 3, `3 workers: ${shown}`);
        assert.ok(first.every((d) => timedOut(d) || lost(d)), shown);
        // Which of the two the other three see depends on the node's timing (CI saw both).
        assert.equal(
          done.filter((d) => lost(d) || d.s >= 15).length,
          3,
          `the other three waited for a worker or came back 596: ${shown}`,
        );
        // A call that gets its worker late may find the held locks gone and succeed.
        assert.ok(later.every((d) => d.s >= 18 && (timedOut(d) || d.err === null)), shown);
      } finally {
        await holder.status; // the holders end by themselves (sleep 28)
      }
    } finally {
      for (const id of ids) await destroyVm(id);
    }
  },
);

laneTest(
  "fact: /nodes/<node>/version answers a token with no privilege on the node; /nodes/<node>/status is refused it (403)",
  async () => {
    const r = await rig();
    const id = await laneIdentity("no-audit-all-vms");
    const token = { id: id.tokenId, secret: id.secret };
    const v = await api<{ version: string }>("GET", `/nodes/${r.node}/version`, {}, token);
    assert.equal(v.version, r.version, "the node's own pve-manager version");
    const refused = await api("GET", `/nodes/${r.node}/status`, {}, token).then(
      () => null,
      (e) => e as RigApiError,
    );
    assert.equal(refused?.status, 403, "Sys.Audit on /nodes/<node> is needed there");
  },
);
