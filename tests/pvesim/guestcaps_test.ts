// Self-tests of guests that cannot run the bootstrap (guestcaps.ts): agent
// commands disabled by qemu-ga's block list (RHEL/Rocky 10), guests without
// a shell, and `GET …/agent/info` telling both beforehand.

import assert from "node:assert/strict";
import { type Api, cloneAndWait, rawRequest, startAndBoot, until, withSim } from "./testkit.ts";
import { RHEL10_GUEST } from "./mod.ts";

type Obj = Record<string, unknown>;
const FAST = { cloneMs: 30, cloneNamelessMs: 10, taskMs: 10, agentBootMs: 20 };
const RHEL10 = RHEL10_GUEST;

async function booted(api: Api): Promise<number> {
  const { newid } = await cloneAndWait(api);
  await startAndBoot(api, "pve1", newid);
  return newid;
}

const agent = (vmid: number, cmd: string) => `/nodes/pve1/qemu/${vmid}/agent/${cmd}`;

Deno.test("agent: guest-exec and guest-file-* disabled in the guest: 500 Agent error, inherited by clones", async () => {
  await withSim(async (sim, api) => {
    const vmid = await booted(api);
    const exec = await api.call("POST", agent(vmid, "exec"), { json: { command: ["/bin/sh"] } });
    assert.equal(exec.status, 500);
    assert.equal(
      exec.body.message,
      "Agent error: The command guest-exec has been disabled for this instance\n",
    );
    const write = await rawRequest(sim, "POST", agent(vmid, "file-write"), {
      body: JSON.stringify({ file: "/run/x", content: "aGk=", encode: 0 }),
      headers: { "Content-Type": "application/json" },
    });
    assert.deepEqual(
      [write.status, write.reason],
      [500, "Agent error: The command guest-file-open has been disabled for this instance"],
    );
    assert.equal(sim.vm(vmid)!.execs.length + sim.vm(vmid)!.fileWrites.length, 0);
    // What stays allowed still answers.
    assert.equal((await api.call("POST", agent(vmid, "ping"))).status, 200);
  }, { timing: FAST, templates: [{ vmid: 9000, name: "rhel10", guest: RHEL10 }] });
});

Deno.test("agent/info lists every command with enabled, so a client can tell before it tries", async () => {
  await withSim(async (_sim, api) => {
    const vmid = await booted(api);
    const info = (await api.data("GET", agent(vmid, "info")) as Obj).result as Obj;
    assert.equal(info.version, "9.1.0");
    const cmds = new Map(
      (info.supported_commands as Obj[]).map((c) => [c.name, c.enabled] as const),
    );
    assert.equal(cmds.get("guest-exec"), false);
    assert.equal(cmds.get("guest-file-write"), false);
    assert.equal(cmds.get("guest-ping"), true);
    assert.equal(cmds.get("guest-get-osinfo"), true);
  }, { timing: FAST, templates: [{ vmid: 9000, name: "rhel10", guest: RHEL10 }] });
});

Deno.test("agent: a disabled plain command (get-osinfo) answers 200 with the agent's error as its result", async () => {
  await withSim(async (_sim, api) => {
    const { newid } = await cloneAndWait(api);
    await api.waitTask(
      await api.data("POST", `/nodes/pve1/qemu/${newid}/status/start`) as string,
    );
    // Until the agent is up the call fails `QEMU guest agent is not running`.
    const r = await until(async () => {
      const reply = await api.call("GET", agent(newid, "get-osinfo"));
      return reply.status === 200 ? reply : undefined;
    });
    assert.equal(r.status, 200);
    assert.deepEqual(r.body.data, {
      result: {
        error: {
          class: "CommandNotFound",
          desc: "The command guest-get-osinfo has been disabled for this instance",
        },
      },
    });
  }, {
    timing: FAST,
    templates: [{ vmid: 9000, name: "t", guest: { blockedRpcs: ["guest-get-osinfo"] } }],
  });
});

Deno.test("agent: only guest-file-write disabled: the open truncates the file, then the write fails", async () => {
  await withSim(async (sim, api) => {
    const vmid = await booted(api);
    assert.equal(sim.vm(vmid)!.files["/run/x"], undefined);
    const write = await api.call("POST", agent(vmid, "file-write"), {
      json: { file: "/run/x", content: "aGk=", encode: 0 },
    });
    assert.equal(
      write.body.message,
      "Agent error: The command guest-file-write has been disabled for this instance\n",
    );
    assert.deepEqual(sim.vm(vmid)!.files["/run/x"], new Uint8Array());
  }, {
    timing: FAST,
    templates: [{ vmid: 9000, name: "t", guest: { blockedRpcs: ["guest-file-write"] } }],
  });
});

Deno.test("agent: a guest without /bin/sh cannot spawn a shell (qemu-ga before 9.1 wraps glib's error)", async () => {
  for (
    const [qgaVersion, desc] of [
      [
        "7.2.0",
        "Guest agent command failed, error was 'Failed to execute child process “/bin/sh” (No such file or directory)'",
      ],
      ["9.2.0", "Failed to execute child process “/bin/sh” (No such file or directory)"],
    ]
  ) {
    await withSim(async (sim, api) => {
      const vmid = await booted(api);
      const exec = await api.call("POST", agent(vmid, "exec"), {
        json: { command: ["/bin/sh", "-c", "true"] },
      });
      assert.deepEqual([exec.status, exec.body.message], [500, `Agent error: ${desc}\n`]);
      // Programs it has still run.
      const ok = await api.call("POST", agent(vmid, "exec"), { json: { command: ["true"] } });
      assert.equal(ok.status, 200);
      assert.equal(sim.vm(vmid)!.execs.length, 1);
    }, {
      timing: FAST,
      templates: [{ vmid: 9000, name: "distroless", guest: { noShell: true, qgaVersion } }],
    });
  }
});
