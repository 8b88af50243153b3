// Disk trouble while serving: the state store cannot commit (disk full,
// read-only filesystem). Lifecycle calls must fail with UNAVAILABLE and never
// be acknowledged and then lost; reads keep working and show only committed
// state (the revision never moves back); the log says why once; when the disk
// recovers, the queued changes land and calls succeed again.
//
// Two lanes: the real provider process on a 1 MiB tmpfs that is filled up and
// then freed (needs root to mount; skipped, saying so, without), and the kit
// in-process over a KV database whose commits fail on demand (always runs).

import assert from "node:assert/strict";
import { loadConfig } from "../../src/config/load.ts";
import { createFakeBackend } from "../../src/fake/backend.ts";
import { Code as KitCode, KitError } from "../../src/kit/errors.ts";
import { startKit } from "../../src/kit/kit.ts";
import type { Kit } from "../../src/kit/api.ts";
import { openKvStore } from "../../src/store/kv_store.ts";
import { State } from "../../src/kit/model.ts";
import type { StateStore } from "../../src/kit/store.ts";
import {
  assertCode,
  assertOk,
  Code,
  fakeProviderArgs,
  Harness,
  MachineState as St,
  opIdOf,
  outcome,
  startProvider,
  stateName,
  waitFor,
} from "../harness/mod.ts";
import { kvFaults, READ_ONLY } from "./faulty_kv.ts";

const opts = { sanitizeOps: false, sanitizeResources: false };
const until = (what: string, ok: () => boolean | Promise<boolean>) => waitFor(what, ok, 15_000);

function sh(cmd: string): { ok: boolean; out: string } {
  const r = new Deno.Command("sh", { args: ["-c", cmd], stderr: "piped", stdout: "piped" })
    .outputSync();
  const d = new TextDecoder();
  return { ok: r.success, out: d.decode(r.stdout) + d.decode(r.stderr) };
}

/** Mounting a tmpfs needs root (CAP_SYS_ADMIN); the process lane runs only where it works. */
function tmpfsUnavailable(): string | false {
  if (Deno.build.os !== "linux") return "not Linux";
  const dir = Deno.makeTempDirSync({ prefix: "bfdisk-probe-" });
  try {
    const m = sh(`mount -t tmpfs -o size=64k tmpfs ${dir}`);
    if (!m.ok) return `cannot mount a tmpfs here: ${m.out.trim()}`;
    sh(`umount ${dir}`);
    return false;
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
}

const noTmpfs = tmpfsUnavailable();
if (noTmpfs) console.warn(`[chaos] disk: the process lane is skipped (${noTmpfs})`);

/** Writes zeros until the filesystem says it is full. */
async function fill(path: string): Promise<void> {
  const f = await Deno.open(path, { write: true, create: true });
  const block = new Uint8Array(4096);
  try {
    for (;;) await f.write(block);
  } catch (e) {
    if (!(e instanceof Error && /no space|ENOSPC|os error 28/i.test(e.message))) throw e;
  } finally {
    f.close();
  }
}

function count(text: string, re: RegExp): number {
  return text.split("\n").filter((l) => re.test(l)).length;
}

Deno.test({
  name: "[chaos] disk full under the real provider: UNAVAILABLE, reads work, logged once, recovers",
  ignore: noTmpfs !== false,
  ...opts,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "bfdisk-" });
    const mnt = `${dir}/mnt`;
    await Deno.mkdir(mnt);
    assert.ok(sh(`mount -t tmpfs -o size=1m tmpfs ${mnt}`).ok, "mount tmpfs");
    const state = `${mnt}/state.kv`;
    const filler = `${mnt}/filler`;
    // Debug: each retry of a failing commit logs a line of its own.
    let p = await startProvider({
      args: fakeProviderArgs({ seed: 16, state, fakeDelay: "100ms" }),
      env: { BIGFLEET_LOG_LEVEL: "debug" },
    });
    let h = new Harness(p.addr);
    try {
      const ids = (await h.list()).machines.map((m) => m.id);
      const [a, b, c] = ids;
      assertOk(await outcome(h.create(a)), "Create a");
      await h.mustReach(a, St.IDLE);
      const md = { "disk/k": "v" };
      const opA = opIdOf(await outcome(h.configure(a, "disk-cluster", md)), "Configure a");
      await h.mustReach(a, St.CONFIGURED);

      await fill(filler);
      const before = await h.list();
      // The commit of this Create fails: not acknowledged.
      assertCode(await outcome(h.create(b)), Code.UNAVAILABLE, "Create b on a full disk");
      // From now on calls are refused before they change anything.
      assertCode(await outcome(h.create(c)), Code.UNAVAILABLE, "Create c while failing");
      assertCode(await outcome(h.drain(a, 0)), Code.UNAVAILABLE, "Drain a while failing");

      // Reads keep working, and show what is committed: b is not CREATING.
      assert.equal(stateName((await h.get(b)).state), "SPECULATIVE");
      const gotA = await h.get(a);
      assert.equal(stateName(gotA.state), "CONFIGURED");
      assert.deepEqual(gotA.shard_metadata, md);
      await until("three retries", () => count(p.stderr(), /commit failed again/) >= 3);
      const during = await h.list();
      assert.deepEqual(during.revision, before.revision, "the revision moved while failing");
      assert.equal(during.machines.find((m) => m.id === b)?.state, St.SPECULATIVE);
      const failed = count(p.stderr(), /"level":"ERROR".*state store commit failed/);
      assert.equal(failed, 1, "the failure is logged once, not once per retry");
      assert.match(p.stderr(), /disk is full/);

      await Deno.remove(filler);
      await until("the recovery log line", () => p.stderr().includes("state store recovered"));
      // b's change was queued and has landed: its retry replays it.
      const opB = opIdOf(await outcome(h.create(b)), "Create b after recovery");
      assert.equal(opIdOf(await outcome(h.create(b)), "Create b again"), opB);
      const opC = opIdOf(await outcome(h.create(c)), "Create c after recovery");
      await h.mustReach(b, St.IDLE);
      await h.mustReach(c, St.IDLE);
      const after = await h.list();
      assert.ok(
        BigInt(new TextDecoder().decode(after.revision)) >
          BigInt(new TextDecoder().decode(before.revision)),
        "the revision moves on after recovery",
      );

      // Everything acknowledged survives a SIGKILL.
      h.close();
      await p.stop();
      p = await startProvider({ args: fakeProviderArgs({ seed: 16, state }) });
      h = new Harness(p.addr);
      assert.equal(opIdOf(await outcome(h.configure(a, "disk-cluster", md)), "replay a"), opA);
      assert.equal(opIdOf(await outcome(h.create(b)), "replay Create b"), opB);
      assert.equal(opIdOf(await outcome(h.create(c)), "replay Create c"), opC);
      assert.equal(stateName((await h.get(a)).state), "CONFIGURED");
    } finally {
      h.close();
      await p.stop();
      sh(`umount ${mnt}`);
      await Deno.remove(dir, { recursive: true });
    }
  },
});

// ---- In-process: the kit over a KV database that refuses commits on demand.

async function openKit(path: string, store: StateStore, delayMs: number): Promise<Kit> {
  const config = await loadConfig([
    "--provider=disk",
    "--use-fake-backend",
    "--seed-count=8",
    "--metrics-addr=",
    `--state=${path}`,
  ]);
  return await startKit({
    provider: config.provider,
    backend: createFakeBackend({ delayMs }),
    store,
    slots: config.slots,
  });
}

function unfenced(machineId: string) {
  return { machineId, token: { shardId: "", epoch: 0n, seq: 0n } };
}

async function unavailable(p: Promise<unknown>, re: RegExp, what: string): Promise<void> {
  await assert.rejects(
    p,
    (e) => e instanceof KitError && e.code === KitCode.Unavailable && re.test(e.message),
    `${what}: want UNAVAILABLE matching ${re}`,
  );
}

Deno.test({
  name: "[chaos] disk read-only under the kit: nothing acknowledged is lost, reads show committed",
  ...opts,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "bfdisk-kit-" });
    const path = `${dir}/state.kv`;
    const faults = kvFaults();
    faults.error = READ_ONLY;
    const store = await openKvStore(path, { wrapKv: faults.wrap });
    // The records the kit hands over, to know when a background completion has happened.
    const handed: { id: string; state: State }[] = [];
    const watched: StateStore = Object.create(store, {
      putMachine: {
        value(m: Parameters<StateStore["putMachine"]>[0]) {
          handed.push({ id: m.id, state: m.state });
          store.putMachine(m);
        },
      },
    });
    let kit = await openKit(path, watched, 100);
    try {
      const [a, b, c] = (await kit.list({ states: [], maxResults: 0 })).machines.map((m) => m.id);
      const ackA = await kit.create(unfenced(a));
      const rev0 = (await kit.list({ states: [], maxResults: 0 })).revision;

      faults.failing = true; // a's completion (IDLE) comes while the disk refuses writes
      await unavailable(kit.create(unfenced(b)), /not acknowledged/, "Create b");
      assert.equal(store.failure, READ_ONLY);
      await unavailable(kit.create(unfenced(c)), /nothing was changed/, "Create c");
      await unavailable(
        kit.reconcile(AbortSignal.timeout(5_000)),
        /nothing was changed/,
        "reconcile",
      );
      await until("a's completion", () => handed.some((m) => m.id === a && m.state === State.Idle));
      assert.equal((await kit.get(a)).state, State.Creating, "a's IDLE is not committed yet");
      assert.equal((await kit.get(b)).state, State.Speculative, "b's CREATING is not committed");
      const during = await kit.list({ states: [], maxResults: 0 });
      assert.equal(during.revision, rev0, "List shows the committed revision");
      assert.deepEqual(
        during.machines.filter((m) => m.state !== State.Speculative).map((m) => m.id),
        [a],
      );
      // The cursor view agrees: nothing changed since rev0 as far as anyone may know.
      const since = new TextEncoder().encode(String(rev0));
      assert.deepEqual(
        (await kit.list({ states: [], maxResults: 0, sinceRevision: since })).machines,
        [],
      );

      faults.failing = false;
      await until("the store to recover", () => store.failure === null);
      assert.equal((await kit.get(a)).state, State.Idle);
      const ackB = await kit.create(unfenced(b));
      assert.equal((await kit.create(unfenced(b))).operationId, ackB.operationId);
      assert.equal(
        (await kit.get(c)).state,
        State.Speculative,
        "the refused Create changed nothing",
      );
      assert.ok((await kit.list({ states: [], maxResults: 0 })).revision > rev0);
      await until("b to be IDLE", async () => (await kit.get(b)).state === State.Idle);

      // A Configure whose commit fails is not acknowledged either, and lands on recovery.
      const configureA = {
        ...unfenced(a),
        clusterId: "k",
        bootstrap: new Uint8Array(),
        shardMetadata: [["k", "v"]] as [string, string][],
      };
      faults.failing = true;
      await unavailable(kit.configure(configureA), /not acknowledged/, "Configure a");
      assert.equal((await kit.get(a)).state, State.Idle);
      faults.failing = false;
      await until("the store to recover", () => store.failure === null);
      assert.equal((await kit.get(a)).cluster, "k");
      assert.deepEqual((await kit.get(a)).shardMetadata, [["k", "v"]]);
      const ackConf = await kit.configure(configureA);

      await kit.close();
      kit = await openKit(path, await openKvStore(path), 0);
      assert.equal((await kit.configure(configureA)).operationId, ackConf.operationId);
      assert.equal((await kit.get(a)).ops.create, ackA.operationId);
      assert.equal((await kit.create(unfenced(b))).operationId, ackB.operationId);
      assert.equal((await kit.get(c)).state, State.Speculative);
    } finally {
      await kit.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
