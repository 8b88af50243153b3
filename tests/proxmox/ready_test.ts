// The readiness gate against the simulator's scripted guest: after the hook,
// Configure holds until the node is Ready, fails with what it checked when it
// never is, and is skipped with --ready-gate=false.

import assert from "node:assert/strict";
import { BackendError } from "../../src/kit/backend.ts";
import { BUILTIN_READY_EXEC, readyDeadline } from "../../src/proxmox/vm/ready.ts";
import { rig, signal, slot } from "./helpers.ts";
import type { ReadyGate } from "../../src/config/types.ts";

const blob = new TextEncoder().encode("kubeadm join --config /dev/null\n");

async function configured(r: Awaited<ReturnType<typeof rig>>) {
  const s = slot("pve1");
  const { hostRef } = await r.backend.create(s, signal());
  const machine = { machineId: s.machineId, hostRef };
  const vmid = Number(hostRef.split("/")[1]);
  return { machine, vmid };
}

Deno.test("ready gate: Configure resolves only once the node is Ready, polling gently", async () => {
  await using r = await rig({}, {}, { timing: { readyPollMs: 150 } });
  r.sim.faults.readyAfterMs = 500;
  const { machine, vmid } = await configured(r);
  await r.backend.configure(machine, { clusterId: "c1", bootstrap: blob }, signal());
  const vm = r.sim.vm(vmid)!;
  const joined = vm.bootstrapRuns[0].at;
  const checks = vm.readyChecks;
  assert.ok(checks.length >= 2, `checked until Ready: ${JSON.stringify(checks)}`);
  assert.deepEqual(checks.map((c) => c.ready), [...checks.slice(1).map(() => false), true]);
  assert.ok(checks.at(-1)!.at >= joined + 500, "Ready no earlier than the node turned Ready");
  assert.ok(checks[0].at >= joined, "the first check comes after the hook");
  for (let i = 1; i < checks.length; i++) {
    assert.ok(checks[i].at - checks[i - 1].at >= 140, `checks ${i - 1}→${i} at least 150 ms apart`);
  }
  const exec = vm.execs.find((e) => e.kind === "ready")!;
  assert.deepEqual(exec.command, [...BUILTIN_READY_EXEC]);
});

Deno.test("ready gate: a node that never turns Ready fails Configure with what was checked, before the kit's deadline", async () => {
  await using r = await rig({}, {}, {
    timing: { readyPollMs: 100 },
    timeouts: { configure: 3000 },
  });
  r.sim.faults.readyAfterMs = null;
  const { machine, vmid } = await configured(r);
  const t0 = Date.now();
  await assert.rejects(
    r.backend.configure(machine, { clusterId: "c1", bootstrap: blob }, signal()),
    (e) => {
      assert.ok(e instanceof BackendError, String(e));
      assert.match(
        e.message,
        /^node in VM \d+ not Ready \d+s after the bootstrap hook: checked kubelet healthz \(127\.0\.0\.1:10248\) and the node's Ready condition \(kubectl --kubeconfig=\/etc\/kubernetes\/kubelet\.conf\) \d+ times; last: exit code 1: node \S+ Ready condition \(kubectl --kubeconfig=\/etc\/kubernetes\/kubelet\.conf\): False$/,
      );
      return true;
    },
  );
  const took = Date.now() - t0;
  // Margin: a fifteenth of 3 s = 200 ms before the kit would time Configure out.
  assert.ok(took < 3000, `gave up before the kit's 3 s deadline (${took} ms)`);
  assert.ok(r.sim.vm(vmid)!.readyChecks.length >= 3);
});

Deno.test("ready gate: --ready-timeout bounds the wait after the hook", async () => {
  const gate: ReadyGate = { exec: null, timeoutMs: 400 };
  await using r = await rig({}, {}, { timing: { readyPollMs: 100 } }, { readyGate: gate });
  r.sim.faults.readyAfterMs = null;
  const { machine } = await configured(r);
  const t0 = Date.now();
  await assert.rejects(
    r.backend.configure(machine, { clusterId: "c1", bootstrap: blob }, signal()),
    /not Ready 0s after the bootstrap hook/,
  );
  assert.ok(Date.now() - t0 < 5000);
});

Deno.test("ready gate: a hook that fails is reported as the hook's failure, no check runs", async () => {
  await using r = await rig();
  r.sim.faults.bootstrapExitCode = 2;
  r.sim.faults.bootstrapStderr = "join failed\n";
  const { machine, vmid } = await configured(r);
  await assert.rejects(
    r.backend.configure(machine, { clusterId: "c1", bootstrap: blob }, signal()),
    /bootstrap hook \/bin\/sh in VM \d+ failed \(exit code 2\): join failed/,
  );
  assert.equal(r.sim.vm(vmid)!.readyChecks.length, 0);
});

Deno.test("ready gate: --ready-gate=false makes the hook's exit 0 enough", async () => {
  await using r = await rig({}, {}, {}, { readyGate: null });
  r.sim.faults.readyAfterMs = null;
  const { machine, vmid } = await configured(r);
  await r.backend.configure(machine, { clusterId: "c1", bootstrap: blob }, signal());
  assert.equal(r.sim.vm(vmid)!.readyChecks.length, 0);
});

Deno.test("ready gate: --ready-exec runs the operator's own argv", async () => {
  const argv = ["/usr/local/bin/node-ready", "--quiet"];
  await using r = await rig({ readyExec: argv }, {}, { timing: { readyPollMs: 50 } }, {
    readyGate: { exec: argv, timeoutMs: 0 },
  });
  r.sim.faults.readyAfterMs = 200;
  const { machine, vmid } = await configured(r);
  await r.backend.configure(machine, { clusterId: "c1", bootstrap: blob }, signal());
  const vm = r.sim.vm(vmid)!;
  assert.ok(vm.readyChecks.at(-1)!.ready);
  assert.deepEqual(vm.execs.filter((e) => e.kind === "ready").map((e) => e.command)[0], argv);
});

Deno.test("ready deadline: the gate's own timeout, never past a margin before Configure's", () => {
  const gate = (timeoutMs: number): ReadyGate => ({ exec: null, timeoutMs });
  // 8m Configure: 30 s margin.
  assert.equal(readyDeadline(gate(0), 0, 480_000, 1000), 450_000);
  assert.equal(readyDeadline(gate(60_000), 0, 480_000, 1000), 61_000);
  assert.equal(readyDeadline(gate(600_000), 0, 480_000, 1000), 450_000);
  // Short Configure timeouts: a fifteenth.
  assert.equal(readyDeadline(gate(0), 0, 3000, 0), 2800);
});
