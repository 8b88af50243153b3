// The provider SIGKILLed while its own clone is in its first phase, on the
// real PVE: clone_vm has written its temporary config (`lock: clone`,
// description ' qmclone temporary file', no name, no marker) and is copying
// the first disk. The clone is held there by stopping its `qemu-img convert`
// (SIGSTOP inside the rig; qemu-server runs it without a timeout), so the
// restarted provider meets exactly that shape; then it is let go. Template
// 9102 is our guest with 64 MiB of data on its disk, so the copy lasts long
// enough to be caught.

import assert from "node:assert/strict";
import { Harness, MachineState, type ProviderProcess } from "../harness/mod.ts";
import {
  CREATE_MS,
  laneIdentity,
  laneMachine,
  type LaneProviderOptions,
  markersInPool,
  type Mode,
  qmConfig,
  startLaneProvider,
  sweepPools,
  until,
  vmidOf,
} from "./lane.ts";
import { destroyVm, laneTest, rig, run } from "./rig.ts";
import { DATA_TEMPLATE_VMID, dataTemplate } from "./template.ts";

const PROVIDER = "inflight";
const FREEZE_S = 120;

/**
 * Stop the `qemu-img convert` of the next full clone of template 9102 as soon
 * as it runs: the clone stays in its temporary config until `thaw`. Resolves
 * once the watcher runs in the rig; `frozen` is the process and the clone's VMID.
 */
async function freezeNextClone(): Promise<{ frozen: Promise<{ pid: number; vmid: number }> }> {
  const src = `/var/lib/vz/images/${DATA_TEMPLATE_VMID}/base-${DATA_TEMPLATE_VMID}-disk-0.raw`;
  const script = `
    echo armed
    while [ "$SECONDS" -lt ${FREEZE_S} ]; do
      line=$(pgrep --runstates R,S,D -af 'qemu-img[.a-z]* convert -p -n .* ${src} ' | head -n 1)
      if [ -n "$line" ] && kill -STOP "\${line%% *}"; then echo "$line"; exit 0; fi
    done
    echo "no clone of ${DATA_TEMPLATE_VMID} started in ${FREEZE_S} s" >&2
    exit 1`;
  const child = new Deno.Command((await rig()).exec, {
    args: ["bash", "-c", script],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(child.stderr).text();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).pipeThrough(lineSplitter());
  const reader = lines.getReader();
  const first = await reader.read();
  if (first.value !== "armed") throw new Error(`freezing a clone: the watcher said ${first.value}`);
  const frozen = (async () => {
    const next = await reader.read();
    const line = next.value ?? "";
    if (next.done) throw new Error(`freezing a clone: ${(await stderr).trim()}`);
    // The rig's qemu-img wrapper (bash, then exec) or the real one; the target may be `zeroinit:…`.
    const m = /^(\d+) .* (?:zeroinit:)?\/var\/lib\/vz\/images\/(\d+)\/vm-\d+-disk-0\.raw$/.exec(
      line,
    );
    if (!m) {
      await thaw(Number(line.split(" ")[0]));
      throw new Error(`freezing a clone: unexpected process ${line}`);
    }
    return { pid: Number(m[1]), vmid: Number(m[2]) };
  })();
  return { frozen };
}

function lineSplitter(): TransformStream<string, string> {
  let rest = "";
  return new TransformStream({
    transform(chunk, ctl) {
      const parts = (rest + chunk).split("\n");
      rest = parts.pop()!;
      for (const p of parts) ctl.enqueue(p);
    },
    flush(ctl) {
      if (rest !== "") ctl.enqueue(rest);
    },
  });
}

async function thaw(pid: number): Promise<void> {
  await run("kill", "-CONT", String(pid));
}

/**
 * A provider cloning from 9102 with the default identity, which
 * setup-token.sh let clone 9100 only: the same role on 9102 while `fn` runs.
 */
async function withDataTemplate(
  mode: Mode,
  fn: (o: LaneProviderOptions) => Promise<void>,
): Promise<void> {
  await sweepPools();
  const id = await laneIdentity(mode);
  await dataTemplate();
  const role = `${id.prefix}TemplateCloner`;
  const path = `/vms/${DATA_TEMPLATE_VMID}`;
  await run("pveum", "acl", "modify", path, "--users", id.user, "--roles", role);
  await run("pveum", "acl", "modify", path, "--tokens", id.tokenId, "--roles", role);
  try {
    await fn({ provider: PROVIDER, seed: 3, template: DATA_TEMPLATE_VMID });
  } finally {
    await run("pveum", "acl", "delete", path, "--tokens", id.tokenId, "--roles", role);
    await run("pveum", "acl", "delete", path, "--users", id.user, "--roles", role);
  }
}

/**
 * Create, catch its clone in the temporary config, SIGKILL the provider, and
 * start it again with the same flags; `after` gets the new provider and the
 * frozen clone, which it thaws (or the clean-up does).
 */
async function killMidClone(
  mode: Mode,
  o: LaneProviderOptions,
  machine: string,
  after: (
    p: ProviderProcess,
    h: Harness,
    clone: { vmid: number; thaw: () => Promise<void> },
  ) => Promise<void>,
): Promise<void> {
  const id = await laneIdentity(mode);
  let p = await startLaneProvider(id, o);
  let h = new Harness(p.addr, { seed: 1 });
  let frozen: { pid: number; vmid: number } | undefined;
  let thawed = false;
  const thawOnce = async () => {
    if (frozen !== undefined && !thawed) await thaw(frozen.pid);
    thawed = true;
  };
  try {
    const { frozen: freezing } = await freezeNextClone();
    await h.create(machine);
    frozen = await freezing.catch((err) => {
      throw new Error(`${(err as Error).message}; the provider's log:\n${p.stderr()}`);
    });
    const cfg = await qmConfig(frozen.vmid);
    assert.equal(cfg?.lock, "clone", JSON.stringify(cfg));
    assert.equal(cfg?.description, " qmclone temporary file", "the clone's temporary config");
    assert.equal(cfg?.name, undefined);
    h.close();
    await p.stop();
    p = await startLaneProvider(id, o);
    h = new Harness(p.addr, { seed: 1 });
    await after(p, h, { vmid: frozen.vmid, thaw: thawOnce });
  } finally {
    await thawOnce();
    h.close();
    await p.stop();
  }
}

/**
 * Killed mid-clone, restarted without state, Create again: the provider must
 * wait for that clone (its log says so in the line `waits` matches) and adopt it.
 */
function adoptsAfterRestart(mode: Mode, i: number, waits: (vmid: number) => RegExp) {
  return () =>
    withDataTemplate(mode, async (o) => {
      const id = await laneIdentity(mode);
      const m = laneMachine(i, PROVIDER);
      await killMidClone(mode, o, m, async (p, h, clone) => {
        // No state: the machine is SPECULATIVE again, and BigFleet asks for it once more.
        await h.create(m);
        const line = waits(clone.vmid);
        await until(() => line.test(p.stderr()), 60_000, `the log line ${line}`);
        await clone.thaw();
        const got = await h.mustReach(m, MachineState.IDLE, CREATE_MS, 100);
        assert.equal(
          vmidOf(got.host?.ref),
          clone.vmid,
          `the clone the killed provider started; the new one's log:\n${p.stderr()}`,
        );
        assert.deepEqual((await markersInPool(id.pool)).get(m), [clone.vmid], "one VM");
        await h.delete(m);
        await h.mustReach(m, MachineState.SPECULATIVE, 120_000, 100);
        assert.equal(await qmConfig(clone.vmid), null);
      });
    });
}

laneTest(
  "own clone in flight: a provider SIGKILLed while its clone is in the temporary config, restarted without state, waits for that clone and adopts it: one VM for the machine",
  // Its token reads every VM: it sees the temporary config and waits on it.
  adoptsAfterRestart(
    "default",
    0,
    (vmid) => new RegExp(`VM ${vmid} is being cloned; waiting to see whose it is`),
  ),
);

laneTest(
  "own clone in flight, pool-only token (the clone joins the pool only at its end): restarted without state, the provider waits for that clone and adopts it: one VM",
  // Its token cannot read the clone before it joins the pool: it waits on the clone task.
  adoptsAfterRestart(
    "no-audit-all-vms",
    2,
    () => /a clone task of this token that this process does not follow is running; waiting/,
  ),
);

laneTest(
  "own clone in flight: restarted with its --state, the machine is FAILED (needs re-drive) and the clone, once done, is recorded as its VM: one VM, none unaccounted for",
  () =>
    withDataTemplate("default", async (o) => {
      const id = await laneIdentity("default");
      const m = laneMachine(1, PROVIDER);
      const dir = await Deno.makeTempDir({ prefix: "bf-realpve-state-" });
      // Reconcile finds a FAILED machine's VM by its marker (the first pass runs at once).
      const withState = { ...o, extra: [`--state=${dir}/state.kv`, "--reconcile-interval=2s"] };
      let vmid: number | undefined;
      try {
        await killMidClone("default", withState, m, async (_p, h, clone) => {
          vmid = clone.vmid;
          const failed = await h.get(m);
          assert.equal(failed.state, MachineState.FAILED);
          assert.equal(
            failed.last_error,
            "create transition interrupted by a provider restart; needs re-drive",
          );
          await clone.thaw();
          const ref = `pve/${clone.vmid}`;
          await until(async () => (await h.get(m)).host?.ref === ref, 120_000, `${m} on ${ref}`);
          assert.equal((await h.get(m)).state, MachineState.FAILED, "FAILED stays FAILED");
          assert.deepEqual((await markersInPool(id.pool)).get(m), [clone.vmid], "one VM");
        });
      } finally {
        if (vmid !== undefined) {
          // Not while the clone task still runs (destroyVm would unlock it under the task).
          const done = vmid;
          await until(async () => (await qmConfig(done))?.lock !== "clone", 60_000, "clone done");
          await destroyVm(vmid);
        }
        await Deno.remove(dir, { recursive: true });
      }
    }),
);
