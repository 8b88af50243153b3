// The state store under SIGKILL at random instants, below the provider: a
// child process (store_writer.ts) writes whole generations of a fleet, each a
// batch far over one KV commit, and is killed while opening, loading
// (possibly finishing an interrupted batch) or writing. After every kill the
// store must load one generation whole — every machine, the fence mark, the
// machine that comes and goes, the chunked record — and no generation the
// child saw committed may be missing. The first kills land in the first
// batch a fresh store takes, which must load as all or nothing.
//
// BFCHAOS_STORE_KILLS (default 25) sizes it; BFCONF_SEED replays the instants.

import assert from "node:assert/strict";
import { openKvStore } from "../../src/store/kv_store.ts";
import { REPO_ROOT, Rng } from "../harness/mod.ts";
import { BIG_ID, FLIP_ID, genMachine } from "./store_writer.ts";

const KILLS = Number(Deno.env.get("BFCHAOS_STORE_KILLS") ?? 25);
const MACHINES = 2_000;
const opts = { sanitizeOps: false, sanitizeResources: false };

interface Run {
  lastDurable: number;
  sawOpened: boolean;
}

/** Spawns the writer and kills it `delayMs` after it opened the store. */
async function runAndKill(path: string, delayMs: number): Promise<Run> {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-read",
      "--allow-write",
      "--allow-env",
      "--allow-sys",
      "--unstable-kv",
      `${REPO_ROOT}tests/chaos/store_writer.ts`,
      path,
      String(MACHINES),
    ],
    cwd: REPO_ROOT,
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const run: Run = { lastDurable: 0, sawOpened: false };
  const opened = Promise.withResolvers<void>();
  let errText = "";
  const readOut = (async () => {
    let buf = "";
    for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
      buf += chunk;
      const lines = buf.split("\n");
      buf = lines.pop()!;
      for (const line of lines) {
        if (line === "opened") {
          run.sawOpened = true;
          opened.resolve();
        }
        const m = line.match(/^durable (\d+)$/);
        if (m) run.lastDurable = Number(m[1]);
      }
    }
  })();
  const readErr = (async () => {
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) errText += chunk;
  })();
  const status = child.status.then((s) => {
    opened.resolve();
    return s;
  });
  await opened.promise;
  await new Promise((r) => setTimeout(r, delayMs));
  try {
    child.kill("SIGKILL");
  } catch { /* exited on its own: checked below */ }
  const s = await status;
  await Promise.all([readOut, readErr]);
  assert.ok(
    run.sawOpened && s.signal === "SIGKILL",
    `writer did not run until killed:\n${errText}`,
  );
  return run;
}

Deno.test({
  name: `[chaos] state store: ${KILLS} SIGKILLs while writing batches over one KV commit`,
  ...opts,
  async fn() {
    const rng = new Rng();
    const dir = await Deno.makeTempDir({ prefix: "bfchaos-store-" });
    const path = `${dir}/state.kv`;
    let acked = 0;
    const landed: number[] = [];
    try {
      for (let i = 0; i < KILLS; i++) {
        const delay = rng.int(0, 600);
        const run = await runAndKill(path, delay);
        acked = Math.max(acked, run.lastDurable);
        const what = `kill ${i + 1} (${delay} ms after open, last durable ${run.lastDurable})`;

        const store = await openKvStore(path);
        try {
          const saved = await store.load();
          if (saved === null) {
            assert.equal(acked, 0, `${what}: store empty after generation ${acked} was durable`);
            landed.push(0);
            continue;
          }
          const gen = saved.rev;
          // At most the one batch in flight at the kill lands unacknowledged.
          const before = Math.max(acked, landed.at(-1) ?? 0);
          landed.push(gen);
          assert.ok(gen >= before, `${what}: loaded generation ${gen} < ${before}`);
          assert.ok(gen <= before + 1, `${what}: loaded generation ${gen} > ${before} + 1`);
          const byId = new Map(saved.machines.map((m) => [m.id, m]));
          for (let m = 0; m < MACHINES; m++) {
            assert.deepEqual(byId.get(`m/${m}`), genMachine(`m/${m}`, gen), `${what}: m/${m}`);
          }
          const bigGen = gen - (gen % 3);
          if (bigGen > 0) {
            assert.deepEqual(byId.get(BIG_ID), genMachine(BIG_ID, bigGen, 200_000), `${what}: big`);
          } else assert.equal(byId.has(BIG_ID), false, `${what}: big before its first write`);
          if (gen % 2 === 0) {
            assert.deepEqual(byId.get(FLIP_ID), genMachine(FLIP_ID, gen), `${what}: flip`);
          } else assert.equal(byId.has(FLIP_ID), false, `${what}: flip should be deleted`);
          assert.equal(saved.machines.length, MACHINES + (bigGen > 0 ? 1 : 0) + (gen % 2 ? 0 : 1));
          assert.deepEqual(saved.fences, [
            { shardId: "s", machineId: "m/0", mark: { epoch: BigInt(gen), seq: 1n } },
          ], `${what}: fence`);
        } finally {
          await store.close();
        }
      }
      console.log(`generations loaded after each kill: ${landed.join(" ")}`);
      assert.ok(acked > 0, "no generation was ever committed: the kills came too early");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
