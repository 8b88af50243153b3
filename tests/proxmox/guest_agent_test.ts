// Guests that cannot run the bootstrap, through the real provider process
// against the simulator: an agent whose configuration disables guest-exec or
// the guest-file-* commands (RHEL and Rocky 10) fails Configure before the
// secret is written, naming the command and the fix in the guest; a guest
// without /bin/sh fails naming the program, and the blob it was given is
// overwritten rather than left behind.

import assert from "node:assert/strict";
import { Harness, MachineState, startProvider } from "../harness/mod.ts";
import { RHEL10_GUEST, type SimGuest, type Simulator, startSimulator } from "../pvesim/mod.ts";
import { providerArgs } from "./helpers.ts";

const T = { sanitizeOps: false, sanitizeResources: false };
const FAST_SIM = { cloneMs: 120, cloneNamelessMs: 40, taskMs: 20, agentBootMs: 80, execMs: 20 };
const SECRET = `join-token-${crypto.randomUUID()}`;

/** One provider on a simulator whose template's guest is `guest`; `fn` gets an IDLE machine. */
async function withIdle(
  guest: SimGuest,
  fn: (sim: Simulator, h: Harness, id: string, vmid: number) => Promise<void>,
): Promise<void> {
  const sim = await startSimulator({
    timing: FAST_SIM,
    templates: [{ vmid: 9000, name: "guest", guest }],
  });
  const dir = await Deno.makeTempDir({ prefix: "bf-pve-guest-" });
  await Deno.writeTextFile(`${dir}/token`, sim.tokenSecret);
  const p = await startProvider({ args: providerArgs(sim, `${dir}/token`) });
  const h = new Harness(p.addr);
  try {
    const { id, machine } = await h.walkToIdle();
    await fn(sim, h, id, Number(machine.host!.ref.split("/")[1]));
    assert.ok(!p.stderr().includes(SECRET), "the blob never reaches the log");
  } finally {
    h.close();
    await p.stop();
    await sim.close();
    await Deno.remove(dir, { recursive: true });
  }
}

/** Configure `id` with `blob` and wait for it to end FAILED; its last_error. */
async function configureFails(h: Harness, id: string, blob: Uint8Array): Promise<string> {
  await h.configure(id, "c1", {}, undefined, blob);
  return (await h.mustReach(id, MachineState.FAILED, 20_000)).last_error;
}

const agentCalls = (sim: Simulator, vmid: number, cmd: string) =>
  sim.requests.filter((q) => q.path === `/nodes/pve1/qemu/${vmid}/agent/${cmd}`);

Deno.test({
  ...T,
  name:
    "guest agent: commands disabled in the guest (RHEL/Rocky 10) fail Configure before the secret is written, naming them and the fix",
  async fn() {
    await withIdle(RHEL10_GUEST, async (sim, h, id, vmid) => {
      const err = await configureFails(h, id, new TextEncoder().encode(SECRET));
      assert.equal(
        err.split("; ")[0],
        `configure failed: the guest agent of VM ${vmid} refuses guest-file-open, ` +
          "guest-file-write, guest-file-close, guest-exec, guest-exec-status (disabled in its " +
          "configuration)",
      );
      assert.match(err, /; allow them in the guest's qemu-guest-agent .*\/etc\/sysconfig\/qemu-ga/);
      assert.equal(agentCalls(sim, vmid, "info").length, 1, "guest-info read once");
      assert.equal(agentCalls(sim, vmid, "file-write").length, 0, "nothing was written");
      assert.equal(agentCalls(sim, vmid, "exec").length, 0, "nothing was run");
    });
  },
});

Deno.test({
  ...T,
  name: "guest agent: guest-exec alone disabled still fails before the blob goes in",
  async fn() {
    await withIdle({ blockedRpcs: ["guest-exec"] }, async (sim, h, id, vmid) => {
      const err = await configureFails(h, id, new TextEncoder().encode(SECRET));
      assert.match(
        err,
        new RegExp(
          `^configure failed: the guest agent of VM ${vmid} refuses guest-exec \\(disabled in its configuration\\); allow them`,
        ),
      );
      assert.equal(agentCalls(sim, vmid, "file-write").length, 0);
      assert.deepEqual(Object.keys(sim.vm(vmid)!.files), []);
    });
  },
});

Deno.test({
  ...T,
  name:
    "guest without /bin/sh: Configure names the program and the fix, and the blob (or its parts) is overwritten",
  async fn() {
    await withIdle({ noShell: true }, async (sim, h, id, vmid) => {
      const err = await configureFails(h, id, new TextEncoder().encode(SECRET));
      assert.match(
        err,
        new RegExp(
          `^configure failed: the guest of VM ${vmid} cannot run /bin/sh \\(No such file or directory, says its guest agent\\); install it in the template .*--bootstrap-exec`,
        ),
      );
      const files = sim.vm(vmid)!.files;
      assert.deepEqual(Object.keys(files), ["/run/bigfleet-bootstrap"]);
      assert.deepEqual([...files["/run/bigfleet-bootstrap"]], [10], "only a newline is left");
      // A blob too large for one write is written in parts, joined by /bin/sh: they go too.
      const other = await h.walkToIdle();
      const vmid2 = Number(other.machine.host!.ref.split("/")[1]);
      const big = new TextEncoder().encode(SECRET.repeat(4000));
      const err2 = await configureFails(h, other.id, big);
      assert.match(err2, new RegExp(`the guest of VM ${vmid2} cannot run /bin/sh`));
      const left = sim.vm(vmid2)!.files;
      const names = Object.keys(left);
      assert.ok(names.length >= 2, `written in parts: ${names}`);
      for (const name of names) assert.match(name, /^\/run\/bigfleet-bootstrap\.part\d+$/);
      for (const bytes of Object.values(left)) assert.deepEqual([...bytes], [10]);
    });
  },
});
