// A SIGKILL during the first boot of a large fleet must not lose slots: the
// first inventory is written in many KV commits, and a kill between two of
// them used to leave a partial fleet that the next start took as the whole
// truth. Each trial starts on a fresh state file, kills the provider at a
// random instant of its boot, restarts it on the same file and expects every
// slot: either the first inventory landed whole, or none of it did and the
// restart seeds again.
//
// Each kill is timed from the killed process's own first log line (printed
// once the store is open, just before the inventory is built) by a random
// fraction of what building and writing it took in uninterrupted boots, so the
// kills land while the first inventory is being built and written whatever the
// machine's load. (Kills while a store loads are store_kill_test.ts's.) The
// first state commits after the fleet is ready to serve, so most kills must
// land before the killed process said "first state committed", or the test
// has not tested anything. BFCHAOS_BOOT_KILLS (default 20) and
// BFCHAOS_BOOT_SEED (default 5000, ten KV commits' worth) size it; BFCONF_SEED
// replays the fractions.

import assert from "node:assert/strict";
import {
  fakeProviderArgs,
  freePort,
  ProviderClient,
  type ProviderProcess,
  Rng,
  spawnProvider,
  startProvider,
  tail,
  waitFor,
} from "../harness/mod.ts";

const KILLS = Number(Deno.env.get("BFCHAOS_BOOT_KILLS") ?? 20);
const SEED = Number(Deno.env.get("BFCHAOS_BOOT_SEED") ?? 5_000);
const opts = { sanitizeOps: false, sanitizeResources: false };
/** What the provider logs once a new fleet's first state has landed. */
const COMMITTED = "first state committed";

async function listIds(p: ProviderProcess): Promise<Set<string>> {
  const c = new ProviderClient(p.addr, { maxReceiveBytes: 512 * 1024 * 1024, deadlineMs: 60_000 });
  try {
    return new Set((await c.list({})).machines.map((m) => m.id));
  } finally {
    c.close();
  }
}

type Spawned = ReturnType<typeof spawnProvider>;

/** Milliseconds from now until `sp` has written a line containing `text` (it must not exit first). */
async function msUntilLogged(sp: Spawned, text: string): Promise<number> {
  const t0 = performance.now();
  let exited = false;
  sp.child.status.then(() => exited = true);
  await waitFor(
    () => `"${text}" in its log:\n${tail(sp.stderr())}`,
    () => {
      assert.ok(!exited, `the provider exited before "${text}":\n${tail(sp.stderr())}`);
      return sp.stderr().includes(text);
    },
    60_000,
    2,
  );
  return performance.now() - t0;
}

async function kill(sp: Spawned): Promise<void> {
  try {
    sp.child.kill("SIGKILL");
  } catch { /* already exited */ }
  await sp.child.status;
  await sp.pumped;
}

/** Whether the provider's "inventory ready" log line says the fleet was restored. */
function restoredFrom(stderr: string): boolean | null {
  for (const line of stderr.split("\n")) {
    if (!line.includes("inventory ready")) continue;
    try {
      return JSON.parse(line).restored === true;
    } catch { /* not JSON */ }
  }
  return null;
}

Deno.test({
  name: `[chaos] ${KILLS} SIGKILLs during the first boot of ${SEED} slots lose no slot`,
  ...opts,
  async fn() {
    const rng = new Rng();
    const dir = await Deno.makeTempDir({ prefix: "bfchaos-boot-" });
    const args = (state: string) => [
      `--addr=127.0.0.1:${freePort()}`,
      ...fakeProviderArgs({ seed: SEED, state }),
    ];
    try {
      // Two uninterrupted first boots: how long building and writing the inventory takes.
      let build = Infinity;
      for (let i = 0; i < 2; i++) {
        const ref = spawnProvider(args(`${dir}/ref-${i}.kv`));
        await msUntilLogged(ref, "\n");
        build = Math.min(build, await msUntilLogged(ref, COMMITTED));
        await kill(ref);
      }
      const check = await startProvider({
        args: fakeProviderArgs({ seed: SEED, state: `${dir}/ref-0.kv` }),
        readyTimeoutMs: 60_000,
      });
      const want = await listIds(check);
      await check.stop();
      assert.equal(want.size, SEED, "the uninterrupted boot should list every slot");

      const outcomes = { early: 0, restored: 0, reseeded: 0 };
      for (let i = 0; i < KILLS; i++) {
        const state = `${dir}/trial-${i}.kv`;
        const after = Math.round(build * 1.1 * rng.float());
        const sp = spawnProvider(args(state));
        await msUntilLogged(sp, "\n");
        await new Promise((r) => setTimeout(r, after));
        await kill(sp);
        if (!sp.stderr().includes(COMMITTED)) outcomes.early++;

        const p = await startProvider({
          args: fakeProviderArgs({ seed: SEED, state }),
          readyPollMs: 20,
          readyTimeoutMs: 60_000,
        });
        try {
          const got = await listIds(p);
          const missing = [...want].filter((id) => !got.has(id));
          assert.equal(
            missing.length,
            0,
            `kill ${i + 1}, ${after} ms into the build: ${got.size} machines after the restart, ` +
              `${missing.length} slots missing (e.g. ${missing.slice(0, 3).join(", ")})\n` +
              `killed run's stderr:\n${tail(sp.stderr(), 10)}`,
          );
          assert.equal(got.size, SEED, `kill ${i + 1}: unexpected extra machines`);
          if (restoredFrom(p.stderr())) outcomes.restored++;
          else outcomes.reseeded++;
        } finally {
          await p.stop();
        }
        await Deno.remove(state).catch(() => {});
      }
      console.log(
        `first boot of ${SEED} slots (build and write ${Math.round(build)} ms): ${KILLS} kills, ` +
          `${outcomes.early} before "${COMMITTED}"; the restart found the first inventory ` +
          `whole ${outcomes.restored}×, seeded again ${outcomes.reseeded}×`,
      );
      assert.ok(
        outcomes.early >= KILLS / 2,
        `only ${outcomes.early} of ${KILLS} kills landed before the first state was committed`,
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
