// A SIGKILL during the first boot of a large fleet must not lose slots: the
// first inventory is written in many KV commits, and a kill between two of
// them used to leave a partial fleet that the next start took as the whole
// truth. Each trial starts on a fresh state file, kills the provider at a
// random instant of its boot, restarts it on the same file and expects every
// slot: either the first inventory landed whole, or none of it did and the
// restart seeds again.
//
// The instants are drawn over the later part of a boot, where the inventory is
// built and written: from 40% of the way between the first log line and
// "inventory ready" to just past the latter, as timed on an uninterrupted boot.
// (Kills while a store loads are store_kill_test.ts's.) BFCHAOS_BOOT_KILLS
// (default 20) and BFCHAOS_BOOT_SEED (default 5000, ten KV commits' worth)
// size it; BFCONF_SEED replays the instants.

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
} from "../harness/mod.ts";

const KILLS = Number(Deno.env.get("BFCHAOS_BOOT_KILLS") ?? 20);
const SEED = Number(Deno.env.get("BFCHAOS_BOOT_SEED") ?? 5_000);
const opts = { sanitizeOps: false, sanitizeResources: false };

async function listIds(p: ProviderProcess): Promise<Set<string>> {
  const c = new ProviderClient(p.addr, { maxReceiveBytes: 512 * 1024 * 1024, deadlineMs: 60_000 });
  try {
    return new Set((await c.list({})).machines.map((m) => m.id));
  } finally {
    c.close();
  }
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
    try {
      // An uninterrupted first boot: the expected slot ids, and when its state work starts and ends.
      const ref = spawnProvider([
        `--addr=127.0.0.1:${freePort()}`,
        ...fakeProviderArgs({ seed: SEED, state: `${dir}/ref.kv` }),
      ]);
      const t0 = performance.now();
      let first = 0;
      let ready = 0;
      while (ready === 0) {
        const err = ref.stderr();
        if (first === 0 && err.includes("\n")) first = performance.now() - t0;
        if (err.includes("inventory ready")) ready = performance.now() - t0;
        assert.ok(performance.now() - t0 < 60_000, `reference boot never got ready:\n${tail(err)}`);
        await new Promise((r) => setTimeout(r, 5));
      }
      ref.child.kill("SIGKILL");
      await ref.child.status;
      await ref.pumped;
      const check = await startProvider({
        args: fakeProviderArgs({ seed: SEED, state: `${dir}/ref.kv` }),
        readyTimeoutMs: 60_000,
      });
      const want = await listIds(check);
      await check.stop();
      assert.equal(want.size, SEED, "the uninterrupted boot should list every slot");

      const outcomes = { restored: 0, reseeded: 0 };
      for (let i = 0; i < KILLS; i++) {
        const state = `${dir}/trial-${i}.kv`;
        const at = Math.round(first + (ready - first) * (0.4 + 0.7 * rng.float()));
        const sp = spawnProvider([
          `--addr=127.0.0.1:${freePort()}`,
          ...fakeProviderArgs({ seed: SEED, state }),
        ]);
        await new Promise((r) => setTimeout(r, at));
        try {
          sp.child.kill("SIGKILL");
        } catch { /* it already exited: the assertion below says why */ }
        await sp.child.status;
        await sp.pumped;

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
            `kill ${i + 1} at ${at} ms after spawn: ${got.size} machines after the restart, ` +
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
        `first boot of ${SEED} slots (state work ${Math.round(first)}–${Math.round(ready)} ms ` +
          `after spawn): ${KILLS} kills; ` +
          `restart found the first inventory whole ${outcomes.restored}×, seeded again ${outcomes.reseeded}×`,
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
