// Self-tests of the guest agent: readiness, file-write encode semantics,
// exec / exec-status, the scripted guest and its fault switches.

import assert from "node:assert/strict";
import { Api, cloneAndWait, rawRequest, startAndBoot, until } from "./testkit.ts";
import { startSimulator } from "./mod.ts";
import type { SimOptions, Simulator } from "./types.ts";

const FAST = { cloneMs: 20, cloneNamelessMs: 5, taskMs: 10, agentBootMs: 150, execMs: 40 };

/** A sim with one cloned, started VM whose agent is up. */
async function withVm(
  fn: (sim: Simulator, api: Api, base: string, vmid: number) => Promise<void>,
  opts: SimOptions = {},
): Promise<void> {
  const sim = await startSimulator({ ...opts, timing: { ...FAST, ...opts.timing } });
  const api = new Api(sim);
  try {
    const { newid } = await cloneAndWait(api);
    await startAndBoot(api, "pve1", newid);
    await fn(sim, api, `/nodes/pve1/qemu/${newid}`, newid);
  } finally {
    api.close();
    await sim.close();
  }
}

const b64 = (s: string) => btoa(String.fromCharCode(...new TextEncoder().encode(s)));
const text = (b: Uint8Array | undefined) => new TextDecoder().decode(b);

/** Until the guest's process `pid` has finished (exec-status would say exited). */
function execDone(sim: Simulator, vmid: number, pid: number): Promise<true> {
  const exec = () => sim.vm(vmid)!.execs.find((e) => e.pid === pid)!;
  return until(() => Date.now() >= exec().doneAt || undefined);
}

/** exec + poll exec-status until exited; returns the final status. */
async function run(api: Api, base: string, command: string[], inputData?: string) {
  const json: Record<string, unknown> = { command };
  if (inputData !== undefined) json["input-data"] = inputData;
  const { pid } = await api.data("POST", `${base}/agent/exec`, { json }) as { pid: number };
  return await until(async () => {
    const s = await api.data("GET", `${base}/agent/exec-status?pid=${pid}`) as Record<
      string,
      unknown
    >;
    return s.exited ? s : null;
  });
}

Deno.test("agent readiness: not running until boot, not configured, VM not running", async () => {
  const sim = await startSimulator({
    timing: { ...FAST, agentBootMs: 200 },
    templates: [
      { vmid: 9000, name: "tmpl-k8s" },
      { vmid: 9001, name: "tmpl-noagent", agent: null },
      { vmid: 9002, name: "tmpl-agent0", agent: "0" },
    ],
  });
  const api = new Api(sim);
  try {
    const { newid } = await cloneAndWait(api);
    const base = `/nodes/pve1/qemu/${newid}`;
    const stopped = await rawRequest(sim, "GET", `${base}/agent/get-osinfo`);
    assert.equal(stopped.reason, `VM ${newid} is not running`);
    await api.waitTask(await api.data("POST", `${base}/status/start`) as string);
    const booting = await rawRequest(sim, "GET", `${base}/agent/get-osinfo`);
    assert.equal(booting.status, 500);
    assert.equal(booting.reason, "QEMU guest agent is not running");
    assert.equal(JSON.parse(booting.body).message, "QEMU guest agent is not running\n");
    await until(async () => (await api.call("GET", `${base}/agent/get-osinfo`)).status === 200);
    const info = await api.data("GET", `${base}/agent/get-osinfo`) as { result: { id: string } };
    assert.equal(info.result.id, "debian");
    assert.deepEqual(await api.data("POST", `${base}/agent/ping`), { result: {} });

    // Started, then given the boot a guest needs: a VM started after them has
    // its agent up by then, theirs still answer as they do at once.
    const started: [number, string][] = [];
    for (
      const [src, text] of [[9001, "No QEMU guest agent configured"], [
        9002,
        "QEMU guest agent is not running",
      ]] as const
    ) {
      const c = await cloneAndWait(api, {}, { node: "pve1", vmid: src });
      await api.waitTask(
        await api.data("POST", `/nodes/pve1/qemu/${c.newid}/status/start`) as string,
      );
      started.push([c.newid, text]);
    }
    const later = await cloneAndWait(api);
    await startAndBoot(api, "pve1", later.newid);
    for (const [vmid, text] of started) {
      const r = await api.call("POST", `/nodes/pve1/qemu/${vmid}/agent/ping`);
      assert.equal(r.body.message, text + "\n");
    }
  } finally {
    api.close();
    await sim.close();
  }
});

Deno.test("agent faults: timeouts, agentDown, agentSlowMs", async () => {
  await withVm(async (sim, api, base, vmid) => {
    sim.faults.agentTimeouts = 1;
    const t = await api.call("GET", `${base}/agent/get-osinfo`);
    assert.equal(
      t.body.message,
      `VM ${vmid} qmp command 'guest-get-osinfo' failed - got timeout\n`,
    );
    assert.equal((await api.call("GET", `${base}/agent/get-osinfo`)).status, 200);
    sim.faults.agentDown = true;
    assert.equal(
      (await api.call("POST", `${base}/agent/ping`)).body.message,
      "QEMU guest agent is not running\n",
    );
    sim.faults.agentDown = false;
    sim.faults.agentSlowMs = 120;
    const t0 = Date.now();
    assert.equal((await api.call("POST", `${base}/agent/ping`)).status, 200);
    assert.ok(Date.now() - t0 >= 110);
  });
});

Deno.test("file-write: encode=0 is base64, encode=1 writes the text (double-encode bug)", async () => {
  await withVm(async (sim, api, base, vmid) => {
    const script = "#!/bin/sh\necho héllo\n";
    await api.data("POST", `${base}/agent/file-write`, {
      json: { file: "/run/a", content: b64(script), encode: 0 },
    });
    assert.equal(text(sim.vm(vmid)!.files["/run/a"]), script);
    // A client that base64s and leaves encode=1 gets base64 text in the guest.
    await api.data("POST", `${base}/agent/file-write`, {
      json: { file: "/run/b", content: b64(script), encode: 1 },
    });
    assert.equal(text(sim.vm(vmid)!.files["/run/b"]), b64(script));
    // Default is encode=1; Latin-1 characters become single bytes, wider ones die.
    await api.data("POST", `${base}/agent/file-write`, {
      form: new URLSearchParams({ file: "/run/c", content: "é" }),
    });
    assert.deepEqual(Array.from(sim.vm(vmid)!.files["/run/c"]), [0xe9]);
    const wide = await api.call("POST", `${base}/agent/file-write`, {
      json: { file: "/run/d", content: "€" },
    });
    assert.equal(wide.status, 500);
    assert.match(wide.body.message, /^Wide character/);
    const badB64 = await api.call("POST", `${base}/agent/file-write`, {
      json: { file: "/run/e", content: "not base64!", encode: 0 },
    });
    assert.equal(badB64.status, 500);
    const noDir = await api.call("POST", `${base}/agent/file-write`, {
      json: { file: "/nope/x", content: "", encode: 0 },
    });
    assert.match(noDir.body.message, /^Agent error: failed to open file '\/nope\/x'/);
    const writes = sim.vm(vmid)!.fileWrites;
    assert.deepEqual(writes.map((w) => [w.file, w.encode]), [["/run/a", false], ["/run/b", true], [
      "/run/c",
      true,
    ]]);
  });
});

Deno.test("file-write: 61440-character limit, body limit", async () => {
  await withVm(async (_sim, api, base) => {
    const max = "A".repeat(61440);
    assert.equal(
      (await api.call("POST", `${base}/agent/file-write`, {
        json: { file: "/run/x", content: max, encode: 0 },
      })).status,
      200,
    );
    const over = await api.call("POST", `${base}/agent/file-write`, {
      json: { file: "/run/x", content: max + "AAAA", encode: 0 },
    });
    assert.equal(over.status, 400);
    assert.deepEqual(over.body.errors, { content: "value may only be 61440 characters long" });
    const huge = await api.call("POST", `${base}/agent/file-write`, {
      json: { file: "/run/x", content: "A".repeat(70000), encode: 0 },
    });
    assert.equal(huge.status, 501);
    assert.equal(huge.body.message, "for data too large\n");
  }, { maxBodyBytes: 65536 });
});

Deno.test("exec: bootstrap run, exec-status lifecycle, one-shot status", async () => {
  await withVm(async (sim, api, base, vmid) => {
    const blob = "#!/bin/sh\nkubeadm join …\n";
    await api.data("POST", `${base}/agent/file-write`, {
      json: { file: "/run/bigfleet-bootstrap", content: b64(blob), encode: 0 },
    });
    const { pid } = await api.data("POST", `${base}/agent/exec`, {
      json: { command: ["/bin/sh", "/run/bigfleet-bootstrap"], "input-data": "" },
    }) as { pid: number };
    assert.equal(typeof pid, "number");
    assert.deepEqual(await api.data("GET", `${base}/agent/exec-status?pid=${pid}`), { exited: 0 });
    await execDone(sim, vmid, pid);
    assert.deepEqual(await api.data("GET", `${base}/agent/exec-status?pid=${pid}`), {
      exited: 1,
      exitcode: 0,
    });
    const second = await rawRequest(sim, "GET", `${base}/agent/exec-status?pid=${pid}`);
    assert.equal(second.status, 500);
    assert.match(second.reason, /^Agent error: .*Invalid parameter 'pid'/);
    const vm = sim.vm(vmid)!;
    assert.equal(vm.bootstrapRuns.length, 1);
    assert.equal(text(vm.bootstrapRuns[0].content), blob);
    assert.deepEqual(vm.execs[0].command, ["/bin/sh", "/run/bigfleet-bootstrap"]);
    assert.equal(vm.execs[0].kind, "bootstrap");
    assert.equal(vm.execs[0].reported, true);

    sim.faults.bootstrapExitCode = 3;
    sim.faults.bootstrapStderr = "kubeadm: join failed\n";
    const failed = await run(api, base, ["/bin/sh", "/run/bigfleet-bootstrap"]);
    assert.deepEqual(failed, { exited: 1, exitcode: 3, "err-data": "kubeadm: join failed\n" });
  });
});

Deno.test("exec: form-encoded command, chunked delivery through the mini shell", async () => {
  await withVm(async (sim, api, base, vmid) => {
    const blob = "x".repeat(100) + "\n#end\n";
    await api.data("POST", `${base}/agent/file-write`, {
      json: { file: "/run/bf.0", content: b64(blob.slice(0, 50)), encode: 0 },
    });
    await api.data("POST", `${base}/agent/file-write`, {
      json: { file: "/run/bf.1", content: b64(blob.slice(50)), encode: 0 },
    });
    const form = new URLSearchParams();
    for (
      const a of [
        "/bin/sh",
        "-c",
        "umask 077; cat -- '/run/bf.0' '/run/bf.1' > '/run/bb.tmp' && " +
        "mv -f -- '/run/bb.tmp' '/run/bigfleet-bootstrap' && rm -f -- '/run/bf.0' '/run/bf.1'",
      ]
    ) form.append("command", a);
    const { pid } = await api.data("POST", `${base}/agent/exec`, { form }) as { pid: number };
    await execDone(sim, vmid, pid);
    assert.deepEqual(await api.data("GET", `${base}/agent/exec-status?pid=${pid}`), {
      exited: 1,
      exitcode: 0,
    });
    const files = sim.vm(vmid)!.files;
    assert.equal(text(files["/run/bigfleet-bootstrap"]), blob);
    assert.equal(files["/run/bf.0"], undefined);
    assert.equal(files["/run/bb.tmp"], undefined);
    // stdin via input-data, base64 -d, nested shell and exit codes.
    const viaStdin = await run(
      api,
      base,
      ["/bin/sh", "-c", "base64 -d > /run/s && /bin/sh /run/bigfleet-bootstrap"],
      b64("hello"),
    );
    assert.equal(viaStdin.exitcode, 0);
    assert.equal(text(sim.vm(vmid)!.files["/run/s"]), "hello");
    assert.equal(sim.vm(vmid)!.bootstrapRuns.length, 1);
    const missing = await run(api, base, ["/bin/sh", "-c", "cat /run/none"]);
    assert.deepEqual(missing, {
      exited: 1,
      exitcode: 1,
      "err-data": "cat: /run/none: No such file or directory\n",
    });
    const notFound = await run(api, base, ["/usr/bin/frobnicate"]);
    assert.equal(notFound.exitcode, 127);
    const out = await run(api, base, ["/bin/sh", "-c", "echo $(hostname); exit 4"]);
    assert.deepEqual(out, { exited: 1, exitcode: 4, "out-data": "Copy-of-VM-tmpl-k8s\n" });
    // Files in /run vanish with the guest.
    sim.stopVmOutOfBand(vmid);
    assert.equal(sim.vm(vmid)!.files["/run/bigfleet-bootstrap"], undefined);
    const off = await api.call("POST", `${base}/agent/exec`, { json: { command: ["true"] } });
    assert.equal(off.body.message, `VM ${vmid} is not running\n`);
  });
});

Deno.test("exec: kubectl drain outcome, delay and custom handler", async () => {
  await withVm(async (sim, api, base, vmid) => {
    const drain = [
      "/bin/sh",
      "-c",
      'kubectl drain "$(hostname)" --ignore-daemonsets --delete-emptydir-data --timeout=30s || true',
    ];
    const ok = await run(api, base, drain);
    assert.equal(ok.exitcode, 0);
    assert.match(String(ok["out-data"]), /node\/Copy-of-VM-tmpl-k8s drained/);
    sim.faults.drainExitCode = 1;
    sim.faults.drainStderr = "error: cannot evict pod\n";
    const masked = await run(api, base, drain);
    assert.deepEqual(masked, { exited: 1, exitcode: 0, "err-data": "error: cannot evict pod\n" });
    const strict = await run(api, base, ["kubectl", "drain", "n1"]);
    assert.equal(strict.exitcode, 1);
    const vm = sim.vm(vmid)!;
    assert.equal(vm.drains.length, 3);
    assert.equal(vm.drains[0].command[1], "drain");
    assert.equal(vm.execs.filter((e) => e.kind === "drain").length, 3);

    sim.faults.drainDelayMs = 150;
    sim.faults.drainExitCode = 0;
    const t0 = Date.now();
    await run(api, base, drain);
    assert.ok(Date.now() - t0 >= 150);

    sim.faults.execHandler = (argv) =>
      argv[0] === "/opt/special" ? { signal: 9, stderr: "killed" } : undefined;
    assert.deepEqual(await run(api, base, ["/opt/special"]), {
      exited: 1,
      signal: 9,
      "err-data": "killed",
    });
  });
});

Deno.test("exec: parameter rules (command required, array, input-data)", async () => {
  await withVm(async (_sim, api, base) => {
    const missing = await api.call("POST", `${base}/agent/exec`, { json: {} });
    assert.equal(missing.status, 400);
    assert.deepEqual(missing.body.errors, {
      command: "property is missing and it is not optional",
    });
    // A single scalar form value is wrapped into a one-element array.
    const scalar = await api.call("POST", `${base}/agent/exec`, { form: "command=true" });
    assert.equal(scalar.status, 200);
    const bogus = await api.call("POST", `${base}/agent/exec`, {
      json: { command: ["true"], capture: 1 },
    });
    assert.equal(bogus.status, 400);
    const status = await api.call("GET", `${base}/agent/exec-status?pid=abc`);
    assert.equal(status.status, 400);
  });
});

Deno.test("scripted guest: the readiness check answers kubelet, then Ready after readyAfterMs, or never", async () => {
  const ready = ["/usr/bin/node-ready"];
  await withVm(async (sim, api, base) => {
    sim.faults.readyAfterMs = 300;
    const before = await run(api, base, ready);
    assert.equal(before.exitcode, 1);
    assert.match(String(before["out-data"]), /^kubelet healthz .*10248\/healthz/);
    const boot = await api.data("POST", `${base}/agent/file-write`, {
      json: { file: "/run/bigfleet-bootstrap", content: b64("kubeadm join\n"), encode: 0 },
    });
    assert.equal(boot, null);
    assert.equal((await run(api, base, ["/bin/sh", "/run/bigfleet-bootstrap"])).exitcode, 0);
    const joined = await run(api, base, ready);
    assert.equal(joined.exitcode, 1);
    assert.match(String(joined["out-data"]), /Ready condition .*: False/);
    // Ready once readyAfterMs has passed since the join: polled, not slept for.
    await until(async () => (await run(api, base, ready)).exitcode === 0);
    sim.faults.readyAfterMs = null;
    assert.equal((await run(api, base, ready)).exitcode, 1, "never Ready");
    const vm = sim.vm(Number(base.split("/").at(-1)))!;
    const seen = vm.readyChecks.map((c) => c.ready);
    assert.deepEqual([seen[0], seen[1], seen.at(-2), seen.at(-1)], [false, false, true, false]);
    assert.equal(seen.filter((r) => r).length, 1, "False until due, then True");
  }, { readyExec: ready });
});
