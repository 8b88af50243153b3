// Process start-up as an operator (and the certification runner) sees it:
// fail-closed refusals are one stderr line and a non-zero exit with nothing
// served; Go-style flags work; a busy metrics port is not fatal. The
// spawn-to-serving time is logged, never asserted (benchmarks own timing).

import assert from "node:assert/strict";
import {
  CapacityType,
  fakeProviderArgs,
  freePort,
  Harness,
  MachineState as St,
  runUntilExit,
  startProvider,
  tail,
} from "../harness/mod.ts";

function isJsonRecord(line: string): boolean {
  try {
    return typeof JSON.parse(line) === "object";
  } catch {
    return false;
  }
}

/** Refused: non-zero exit, exactly one non-empty stderr line matching `re`, port never served. */
async function assertRefused(args: string[], re: RegExp, port = freePort()) {
  const r = await runUntilExit([`--addr=127.0.0.1:${port}`, ...args], { watchPort: port });
  assert.notEqual(r.code, null, `still running after 20 s; stderr:\n${tail(r.stderr)}`);
  assert.notEqual(r.code, 0, "exit code 0 for a refused start");
  const lines = r.stderr.split("\n").filter((l) => l.trim() !== "");
  assert.equal(lines.length, 1, `want one stderr line, got ${lines.length}:\n${tail(r.stderr)}`);
  assert.match(lines[0], re);
  assert.equal(r.served, false, "the port accepted connections before the refusal");
  return lines[0];
}

Deno.test({
  name: "[startup] no backend flags: refuses to start (fail closed)",
  async fn() {
    await assertRefused(
      ["--provider=certify", "--metrics-addr="],
      /use-fake-backend|proxmox-api-url/,
    );
  },
});

Deno.test({
  name: "[startup] an unknown flag is refused, naming the flag",
  async fn() {
    await assertRefused([...fakeProviderArgs({ seed: 8 }), "--no-such-flag=1"], /no-such-flag/);
  },
});

Deno.test({
  name: "[startup] a bad flag value is refused, naming the flag",
  async fn() {
    await assertRefused(fakeProviderArgs({ seed: 8, extra: ["--seed-count=abc"] }), /seed-count/);
  },
});

Deno.test({
  name: "[startup] unparsable or unsupported offerings are refused, naming --offerings",
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "bfconf-startup-" });
    try {
      const bad = `${dir}/bad.json`;
      await Deno.writeTextFile(bad, '[{"instance_type": "pve.large", ');
      await assertRefused(
        fakeProviderArgs({ seed: 8, extra: [`--offerings=${bad}`] }),
        /offerings/,
      );
      const spot = `${dir}/spot.json`;
      await Deno.writeTextFile(
        spot,
        JSON.stringify([{
          instance_type: "pve.large",
          zone: "pve-a",
          count: 2,
          capacity_type: "spot",
        }]),
      );
      await assertRefused(
        fakeProviderArgs({ seed: 8, extra: [`--offerings=${spot}`] }),
        /offerings|spot/,
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "[startup] a busy --addr is one clear line and a non-zero exit",
  async fn() {
    const hold = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    try {
      const port = (hold.addr as Deno.NetAddr).port;
      const r = await runUntilExit([`--addr=127.0.0.1:${port}`, ...fakeProviderArgs({ seed: 8 })]);
      assert.notEqual(r.code, null, "still running with its address taken");
      assert.notEqual(r.code, 0);
      // Structured (JSON) log records may precede it; any other line is noise.
      const lines = r.stderr.split("\n").filter((l) => l.trim() !== "" && !isJsonRecord(l));
      assert.equal(
        lines.length,
        1,
        `want one non-log stderr line, got ${lines.length}:\n${lines.join("\n")}`,
      );
      assert.match(lines[0], /in use|EADDRINUSE/i);
    } finally {
      hold.close();
    }
  },
});

Deno.test({
  name: "[startup] an unusable --state is one line naming the flag, nothing served",
  async fn() {
    const dir = await Deno.makeTempDir();
    try {
      await Deno.writeTextFile(`${dir}/not-a-db.kv`, "this is not a database\n");
      for (const path of [`${dir}/missing/dir/state.kv`, `${dir}/not-a-db.kv`]) {
        const port = freePort();
        const r = await runUntilExit(
          [`--addr=127.0.0.1:${port}`, ...fakeProviderArgs({ seed: 8, state: path })],
          { watchPort: port },
        );
        assert.notEqual(r.code, 0, `${path}: exit code 0`);
        assert.equal(r.served, false, `${path}: served before refusing`);
        const lines = r.stderr.split("\n").filter((l) => l.trim() !== "" && !isJsonRecord(l));
        assert.equal(lines.length, 1, lines.join("\n"));
        assert.match(lines[0], /^error: --state ".*": /);
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "[startup] a --state of a newer format is refused in one line naming both versions",
  async fn() {
    const dir = await Deno.makeTempDir();
    const path = `${dir}/state.kv`;
    try {
      // A state file as a future version would leave it (its own format number).
      const kv = await Deno.openKv(path);
      await kv.atomic().set(["meta", "format"], 3).set(["meta", "rev"], 7).commit();
      kv.close();
      const port = freePort();
      const r = await runUntilExit(
        [`--addr=127.0.0.1:${port}`, ...fakeProviderArgs({ seed: 8, state: path })],
        { watchPort: port },
      );
      assert.notEqual(r.code, 0);
      assert.equal(r.served, false, "served before refusing");
      const lines = r.stderr.split("\n").filter((l) => l.trim() !== "" && !isJsonRecord(l));
      assert.deepEqual(lines, [
        `error: --state ${JSON.stringify(path)}: state format 3 was written by a newer provider; ` +
        "this one reads formats 1 to 2: upgrade it, or give it a fresh --state",
      ]);
      const after = await Deno.openKv(path);
      assert.equal((await after.get(["meta", "format"])).value, 3, "the file is left as it was");
      after.close();
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "[startup] a busy --metrics-addr is not fatal",
  async fn() {
    const hold = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const metrics = `127.0.0.1:${(hold.addr as Deno.NetAddr).port}`;
    const p = await startProvider({
      args: fakeProviderArgs({ seed: 8, extra: [`--metrics-addr=${metrics}`] }),
    });
    const h = new Harness(p.addr);
    try {
      assert.equal((await h.list()).machines.length, 8);
    } finally {
      h.close();
      await p.stop();
      hold.close();
    }
  },
});

Deno.test({
  name: "[startup] Go-style flags (-name value, bare booleans) are accepted",
  async fn() {
    const port = freePort();
    const p = await startProvider({
      port,
      args: ["-provider", "certify", "-use-fake-backend", "--seed-count", "12", "-metrics-addr="],
    });
    const h = new Harness(p.addr);
    try {
      const l = await h.list();
      assert.equal(l.machines.length, 12);
      assert.ok(l.machines.every((m) => m.id.startsWith("certify/")), "ids carry --provider");
    } finally {
      h.close();
      await p.stop();
    }
  },
});

Deno.test({
  name: "[startup] spawn-to-serving time, default seed and the runner's 256 (logged only)",
  async fn() {
    for (
      const [label, args] of [
        ["default seed (32)", ["--provider=certify", "--use-fake-backend", "--metrics-addr="]],
        ["seed 256", fakeProviderArgs({ seed: 256 })],
      ] as const
    ) {
      const p = await startProvider({ args: [...args], readyPollMs: 5 });
      const h = new Harness(p.addr);
      try {
        const n = (await h.list()).machines.length;
        if (label.startsWith("default")) assert.equal(n, 32, "default --seed-count is 32");
        console.log(`spawn → TCP accept, ${label}: ${p.readyMs.toFixed(0)} ms (${n} machines)`);
      } finally {
        h.close();
        await p.stop();
      }
    }
  },
});

Deno.test({
  name: "[startup] built-in offerings: 4 buckets, ids, shapes and prices as specified",
  async fn() {
    const p = await startProvider({ args: fakeProviderArgs({ seed: 10 }) });
    const h = new Harness(p.addr);
    try {
      const ms = (await h.list()).machines;
      const want: Record<string, { n: number; alloc: Record<string, string>; price: number }> = {
        "pve.large/pve-a": { n: 3, alloc: { cpu: "8", memory: "16Gi" }, price: 0.0368 },
        "pve.large/pve-b": { n: 3, alloc: { cpu: "8", memory: "16Gi" }, price: 0.0368 },
        "pve.xlarge/pve-a": { n: 2, alloc: { cpu: "16", memory: "32Gi" }, price: 0.0736 },
        "pve.xlarge/pve-b": { n: 2, alloc: { cpu: "16", memory: "32Gi" }, price: 0.0736 },
      };
      assert.equal(ms.length, 10);
      for (const [bucket, w] of Object.entries(want)) {
        const [type, zone] = bucket.split("/");
        const inBucket = ms.filter((m) => m.instance_type === type && m.zone === zone);
        assert.deepEqual(
          inBucket.map((m) => m.id).sort(),
          Array.from(
            { length: w.n },
            (_, i) => `certify/OnDemand/${bucket}/${String(i).padStart(3, "0")}`,
          ),
          `ids of ${bucket}`,
        );
        for (const m of inBucket) {
          assert.equal(m.state, St.SPECULATIVE);
          assert.equal(m.host, null, `${m.id}: host must be absent`);
          assert.equal(m.capacity_type, CapacityType.ON_DEMAND);
          assert.equal(m.interruption_probability, 0);
          assert.ok(
            Math.abs(m.price_per_hour - w.price) < 1e-9,
            `${m.id}: price ${m.price_per_hour}`,
          );
          assert.deepEqual(
            { ...m.resources?.resources },
            { cpu: "1", memory: "2Gi" },
            `${m.id}: resources`,
          );
          assert.deepEqual({ ...m.allocatable?.resources }, w.alloc, `${m.id}: allocatable`);
          assert.deepEqual({ ...m.labels }, {}, `${m.id}: labels`);
        }
      }
      const w = await h.walkToIdle();
      assert.equal(w.machine.host?.provider, "certify");
      assert.match(
        w.machine.host?.ref ?? "",
        new RegExp(`^${w.machine.zone}/[0-9]+$`),
        "host ref is <node>/<vmid>",
      );
    } finally {
      h.close();
      await p.stop();
    }
  },
});
