// The lifecycle on the real PVE: the provider process (main.ts, real backend)
// with the least-privilege token setup-token.sh made, driven over gRPC,
// against real QEMU guests of our own image. Each step is checked inside the
// rig (`qm config`, the pool, `sha256sum` in the guest, the kubectl
// stand-in's log, pve-storage's volume list), and the readiness gate on a
// guest that turns Ready late and one that never does.

import assert from "node:assert/strict";
import { Harness, MachineState, type ProviderProcess, stateName, waitFor } from "../harness/mod.ts";
import {
  CREATE_MS,
  createIdle,
  laneIdentity,
  laneMachine,
  qmConfig,
  startLaneProvider,
  sweepPools,
  vmidOf,
  volumesOf,
} from "./lane.ts";
import { api, destroyVm, guestExec, laneTest, rig, run } from "./rig.ts";
import { TEMPLATE_VMID } from "./template.ts";

/** Real boots under TCG on a busy 2-core machine: generous bounds, polled, never slept. */
const CONFIGURE_MS = 180_000;
const STEP_MS = 120_000;
/** The provider's --ready-timeout here: a never-Ready node fails in this long. */
const READY_TIMEOUT_S = 25;

let provider: Promise<ProviderProcess> | undefined;
let h: Harness | undefined;

async function harness(): Promise<Harness> {
  provider ??= (async () => {
    await sweepPools();
    const id = await laneIdentity("default");
    // Every clone here inherits protection: 1, which Create must clear (Delete could not destroy it).
    await run("qm", "set", String(TEMPLATE_VMID), "--protection", "1");
    return await startLaneProvider(id, {
      seed: 6,
      extra: [`--ready-timeout=${READY_TIMEOUT_S}s`],
    });
  })();
  const p = await provider;
  return h ??= new Harness(p.addr, { seed: 1 });
}

const machine = (i: number) => laneMachine(i);

async function sha256(bytes: Uint8Array): Promise<string> {
  const d = await crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>);
  return [...new Uint8Array(d)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * A bootstrap as an operator's would be: a shell script that joins (the
 * kubeadm stand-in writes the kubelet's config), here also recording how it
 * was run and when the node is to turn Ready, then `exit` before the payload:
 * 3 MiB of comment lines (random base64), so the blob needs many file-writes.
 */
function bootstrap(readyAfter: string, size = 3 * 1024 * 1024 + 17): Uint8Array {
  const head = [
    "#!/bin/sh",
    "set -e",
    "mkdir -p /etc/standin",
    `echo ${readyAfter} > /etc/standin/ready-after-seconds`,
    `tr '\\0' ' ' < /proc/$$/cmdline > /run/hook-cmdline`,
    "readlink /proc/$$/exe > /run/hook-exe",
    "kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef",
    "exit 0",
    "",
  ].join("\n");
  const rnd = new Uint8Array(Math.ceil(size * 0.75));
  for (let i = 0; i < rnd.length; i += 65536) crypto.getRandomValues(rnd.subarray(i, i + 65536));
  let b64 = "";
  for (let i = 0; i < rnd.length; i += 0x8000) {
    b64 += btoa(String.fromCharCode(...rnd.subarray(i, i + 0x8000)));
  }
  const lines = b64.match(/.{1,76}/g)!.map((l) => `# ${l}`).join("\n");
  return new TextEncoder().encode((head + lines).slice(0, size - 1) + "\n");
}

/** Wait for FAILED; the machine. */
async function failed(hs: Harness, id: string, timeoutMs: number) {
  let last = "";
  return await waitFor(
    () => `${id} FAILED (still ${last})`,
    async () => {
      const m = await hs.get(id);
      last = stateName(m.state);
      return m.state === MachineState.FAILED ? m : undefined;
    },
    timeoutMs,
    200,
  );
}

laneTest(
  "lifecycle: Create clones our template (protection: 1) sized, tagged, pooled, unprotected and started, agent up",
  async () => {
    const hs = await harness();
    const id = await laneIdentity("default");
    const r = await rig();
    const { vmid } = await createIdle(hs, machine(0));
    const cfg = await qmConfig(vmid);
    assert.ok(cfg, `VM ${vmid} exists`);
    assert.equal(cfg.cores, "1", "cores from the type, not the template's 2");
    assert.equal(cfg.sockets, "1");
    assert.equal(cfg.memory, "320", "memory from the type, not the template's 256");
    assert.equal(cfg.protection, "0", "the template's protection: 1 cleared");
    assert.equal((await qmConfig(TEMPLATE_VMID))?.protection, "1", "the template keeps it");
    assert.equal(cfg.name, "bigfleet-lane-ondemand-lane-tiny-pve-000");
    // The default --proxmox-tags: one fixed tag in place of the template's (the machine id is
    // in the marker, so a per-machine tag is optional; docs/configuration.md).
    assert.deepEqual(cfg.tags.split(";").sort(), ["bigfleet"]);
    assert.match(
      cfg.description,
      /"machine_id":"lane\/OnDemand\/lane.tiny\/pve\/000"/,
    );
    assert.match(cfg.args, /-kernel \S+\/vmlinuz -initrd \S+\/initrd\.gz/, "our image, from 9100");
    assert.match(cfg.scsi0, new RegExp(`^local:${vmid}/vm-${vmid}-disk-0\\.qcow2`), "a full clone");
    const pool = await api<{ members: { vmid?: number }[] }>("GET", `/pools/${id.pool}`);
    assert.ok(pool.members.some((m) => m.vmid === vmid), `VM ${vmid} is in pool ${id.pool}`);
    const st = await api<{ status: string }>("GET", `/nodes/${r.node}/qemu/${vmid}/status/current`);
    assert.equal(st.status, "running");
    // Answers (a guest whose agent is not up makes this a 500).
    await api("POST", `/nodes/${r.node}/qemu/${vmid}/agent/ping`);
  },
);

laneTest(
  "lifecycle: Configure delivers 3 MiB byte-exact, the guest's /bin/sh runs it, CONFIGURED only once the node is Ready",
  async () => {
    const hs = await harness();
    const m = await hs.get(machine(0));
    const vmid = vmidOf(m.host?.ref);
    const blob = bootstrap("8");
    await hs.configure(machine(0), "lane-cluster", undefined, undefined, blob);
    await hs.mustReach(machine(0), MachineState.CONFIGURED, CONFIGURE_MS, 100);
    const configuredAt = Date.now();

    const sum = await guestExec(vmid, ["sha256sum", "/run/bigfleet-bootstrap"]);
    assert.equal(sum.stdout.split(" ")[0], await sha256(blob), "byte-exact in the guest");
    assert.equal(
      (await guestExec(vmid, ["cat", "/run/hook-cmdline"])).stdout.trim(),
      "/bin/sh /run/bigfleet-bootstrap",
    );
    assert.equal((await guestExec(vmid, ["cat", "/run/hook-exe"])).stdout.trim(), "/bin/busybox");
    const parts = await guestExec(vmid, ["sh", "-c", "ls /run | grep -c part || true"]);
    assert.equal(parts.stdout.trim(), "0", "the part files are gone");
    // The guest's clock and ours, to place CONFIGURED against the kubelet's first sight of its config.
    const clock = await guestExec(vmid, ["sh", "-c", "date +%s; cat /run/standin/config-seen"]);
    const [guestNow, seen] = clock.stdout.trim().split("\n").map(Number);
    const guestAtConfigured = guestNow - (Date.now() - configuredAt) / 1000;
    assert.ok(
      guestAtConfigured >= seen + 8 - 2,
      `CONFIGURED ${
        guestAtConfigured - seen
      } s after the kubelet saw its config; the node was Ready only after 8 s`,
    );
  },
);

laneTest(
  "lifecycle: Drain runs the guest's kubectl drain with the right arguments",
  async () => {
    const hs = await harness();
    const vmid = vmidOf((await hs.get(machine(0))).host?.ref);
    await hs.drain(machine(0), 30);
    await hs.mustReach(machine(0), MachineState.IDLE, STEP_MS, 100);
    const log = await guestExec(vmid, ["cat", "/var/log/kubectl.log"]);
    assert.equal(
      log.stdout.trim(),
      "drain guest --ignore-daemonsets --delete-emptydir-data --grace-period=30 --timeout=600s",
    );
  },
);

laneTest(
  "guest image: a drain told to hang ends at its --timeout with kubectl's error and a non-zero exit",
  async () => {
    const hs = await harness();
    const vmid = vmidOf((await hs.get(machine(0))).host?.ref);
    const t0 = Date.now();
    const r = await guestExec(vmid, [
      "/bin/sh",
      "-c",
      "touch /etc/standin/drain-hang; kubectl drain guest --timeout=3s; s=$?; rm /etc/standin/drain-hang; exit $s",
    ]);
    assert.equal(r.code, 1);
    assert.match(
      r.stderr,
      /error: unable to drain node "guest" due to error: global timeout reached: 3s/,
    );
    assert.ok(Date.now() - t0 >= 3000, "it waited out the timeout");
  },
);

laneTest(
  "lifecycle: Delete removes the VM and its disks from the storage",
  async () => {
    const hs = await harness();
    const vmid = vmidOf((await hs.get(machine(0))).host?.ref);
    assert.ok((await volumesOf(vmid)).length > 0, "the clone has its disk before Delete");
    await hs.delete(machine(0));
    const gone = await hs.mustReach(machine(0), MachineState.SPECULATIVE, STEP_MS, 100);
    assert.equal(gone.host, null);
    assert.equal(await qmConfig(vmid), null, `VM ${vmid} is gone`);
    assert.deepEqual(await volumesOf(vmid), [], "no volume of it left on the storage");
  },
);

laneTest(
  `Configure ends FAILED: a hook exiting non-zero (its exit code and stderr); a node never Ready after --ready-timeout=${READY_TIMEOUT_S}s (what was checked)`,
  async () => {
    const hs = await harness();
    // Two guests at once: each case is mostly waiting.
    const [hook, never] = await Promise.all([
      createIdle(hs, machine(1)),
      createIdle(hs, machine(2)),
    ]);
    try {
      const failing = new TextEncoder().encode(
        "echo 'preflight: [ERROR] token expired' >&2\necho 'kubeadm join failed' >&2\nexit 7\n",
      );
      await hs.configure(machine(1), "lane-cluster", undefined, undefined, failing);
      await hs.configure(
        machine(2),
        "lane-cluster",
        undefined,
        undefined,
        bootstrap("never", 4096),
      );
      const t0 = Date.now();
      assert.equal(stateName((await hs.get(machine(2))).state), "CONFIGURING");
      const [m1, m2] = await Promise.all([
        failed(hs, machine(1), CONFIGURE_MS),
        failed(hs, machine(2), CONFIGURE_MS),
      ]);
      assert.match(
        m1.last_error,
        new RegExp(
          `^configure failed: bootstrap hook /bin/sh in VM ${hook.vmid} failed \\(exit code 7\\): ` +
            "preflight: \\[ERROR\\] token expired\\nkubeadm join failed$",
        ),
      );
      assert.ok(Date.now() - t0 >= (READY_TIMEOUT_S - 5) * 1000, "held until the gate's timeout");
      assert.match(
        m2.last_error,
        new RegExp(
          `^configure failed: node in VM ${never.vmid} not Ready \\d+s after the bootstrap hook: ` +
            "checked kubelet healthz \\(127\\.0\\.0\\.1:10248\\) and the node's Ready condition " +
            "\\(kubectl --kubeconfig=/etc/kubernetes/kubelet\\.conf\\) \\d+ times; last: exit code 1: " +
            "node guest Ready condition \\(kubectl --kubeconfig=/etc/kubernetes/kubelet\\.conf\\): False$",
        ),
      );
      // The join did run: the kubelet answers, only the Ready condition never came.
      const healthz = await guestExec(never.vmid, [
        "wget",
        "-q",
        "-O",
        "-",
        "http://127.0.0.1:10248/healthz",
      ]);
      assert.equal(healthz.stdout, "ok");
    } finally {
      // FAILED is terminal: the lane removes these VMs itself.
      await Promise.all([destroyVm(hook.vmid), destroyVm(never.vmid)]);
    }
  },
);

laneTest(
  "template locked by a backup: Create waits while `lock: backup` is on 9100, then clones",
  async () => {
    const hs = await harness();
    const id = await laneIdentity("default");
    const members = async () =>
      (await api<{ members: unknown[] }>("GET", `/pools/${id.pool}`)).members.length;
    const before = await members();
    await run("qm", "set", String(TEMPLATE_VMID), "--lock", "backup");
    let unlocked = false;
    try {
      await hs.create(machine(3));
      await hs.staysIn(machine(3), MachineState.CREATING, 8000, 250);
      assert.equal(await members(), before, "nothing cloned while the template is locked");
      await run("qm", "unlock", String(TEMPLATE_VMID));
      unlocked = true;
      const m = await hs.mustReach(machine(3), MachineState.IDLE, CREATE_MS, 100);
      await hs.delete(machine(3));
      await hs.mustReach(machine(3), MachineState.SPECULATIVE, STEP_MS, 100);
      assert.equal(await qmConfig(vmidOf(m.host?.ref)), null);
    } finally {
      if (!unlocked) await run("qm", "unlock", String(TEMPLATE_VMID));
    }
  },
);

laneTest("lifecycle: stop the provider", async () => {
  h?.close();
  const p = await provider?.catch(() => undefined);
  await p?.stop();
  await run("qm", "set", String(TEMPLATE_VMID), "--delete", "protection");
});
