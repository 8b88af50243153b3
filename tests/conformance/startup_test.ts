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
  waitFor,
  waitForServingLine,
} from "../harness/mod.ts";
import { type Simulator, startSimulator } from "../pvesim/mod.ts";
import { providerArgs } from "../proxmox/helpers.ts";

function isJsonRecord(line: string): boolean {
  try {
    return typeof JSON.parse(line) === "object";
  } catch {
    return false;
  }
}

/** Refused: non-zero exit, exactly one non-empty stderr line matching `re`, port never served. */
async function assertRefused(
  args: string[],
  re: RegExp,
  port = freePort(),
  env?: Record<string, string>,
) {
  const r = await runUntilExit([`--addr=127.0.0.1:${port}`, ...args], { watchPort: port, env });
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

Deno.test({
  name: "[startup] the fake backend with a cluster's --proxmox-api-url is refused, naming both",
  async fn() {
    const url = "--proxmox-api-url=https://pve1.example.invalid:8006/api2/json";
    await assertRefused(
      fakeProviderArgs({ seed: 8, extra: [url] }),
      /^error: --use-fake-backend conflicts with --proxmox-api-url: the fake backend never talks to Proxmox/,
    );
    await assertRefused(
      ["--proxmox-backend=fake", "--metrics-addr=", url],
      /^error: --proxmox-backend=fake conflicts with --proxmox-api-url/,
    );
  },
});

Deno.test({
  name:
    "[startup] an unknown field in the offerings or catalog is refused, naming file, field and the near one",
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "bfconf-startup-" });
    try {
      const offers = `${dir}/offerings.json`;
      await Deno.writeTextFile(
        offers,
        JSON.stringify([{ instance_type: "pve.large", zone: "pve-a", count: 2, resoruces: {} }]),
      );
      const line = await assertRefused(
        fakeProviderArgs({ seed: 8, extra: [`--offerings=${offers}`] }),
        /^error: --offerings: ".*offerings\.json": offering 0: unknown field "resoruces" \(did you mean "resources"\?\)$/,
      );
      assert.ok(line.includes(offers), line);
      const types = `${dir}/types.json`;
      await Deno.writeTextFile(types, JSON.stringify({ "pve.large": { vcpu: 8, memroy_mib: 1 } }));
      await assertRefused(
        fakeProviderArgs({ seed: 8, extra: [`--instance-types=${types}`] }),
        /^error: --instance-types: ".*types\.json": instance type "pve\.large": unknown field "memroy_mib" \(did you mean "memory_mib"\?\)$/,
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "[startup] a catalog that is not JSON says in words what was expected where",
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "bfconf-startup-" });
    try {
      const types = `${dir}/types.yaml`;
      await Deno.writeTextFile(types, "name: pve.large\nvcpu: 8\n");
      await assertRefused(
        fakeProviderArgs({ seed: 8, extra: [`--instance-types=${types}`] }),
        /^error: --instance-types: ".*types\.yaml": expected a JSON value \(an object, array, string, number, true, false or null\) but found "name:" at line 1 column 1$/,
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "[startup] empty offerings serve 0 machines, and say so with a WARN line",
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "bfconf-startup-" });
    const offers = `${dir}/empty.json`;
    await Deno.writeTextFile(offers, "[]\n");
    const p = await startProvider({
      args: fakeProviderArgs({ seed: 8, extra: [`--offerings=${offers}`] }),
    });
    const h = new Harness(p.addr);
    try {
      assert.equal((await h.list()).machines.length, 0);
      const warned = () =>
        p.stderr().split("\n").filter(isJsonRecord).map((l) => JSON.parse(l)).find((r) =>
          r.level === "WARN" && r.message.includes("defines no offerings")
        );
      await waitFor("the empty-offerings WARN", () => warned() !== undefined);
      assert.match(warned().message, /serves 0 machines/);
      assert.ok(warned().message.includes(offers));
    } finally {
      h.close();
      await p.stop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name:
    "[startup] BIGFLEET_LOG_LEVEL takes the level as the logs print it (WARN, warning, wrn); unknown is refused",
  async fn() {
    for (const spelling of ["warn", "WARN", "warning", "wrn"]) {
      const p = await startProvider({
        args: fakeProviderArgs({ seed: 8 }),
        env: { BIGFLEET_LOG_LEVEL: spelling },
      });
      const h = new Harness(p.addr);
      try {
        await h.list();
        const records = () => p.stderr().split("\n").filter(isJsonRecord).map((l) => JSON.parse(l));
        // The fake's WARN comes before the port opens; no INFO line (inventory, serving) may show.
        await waitFor(
          `${spelling}: the WARN line`,
          () => records().some((r) => r.level === "WARN"),
        );
        assert.deepEqual(
          records().filter((r) => r.level === "INFO").map((r) => r.message),
          [],
          `${spelling}: INFO lines at level ${spelling}`,
        );
      } finally {
        h.close();
        await p.stop();
      }
    }
    await assertRefused(
      fakeProviderArgs({ seed: 8 }),
      /^error: BIGFLEET_LOG_LEVEL: unknown log level "verbose" \(want trace, debug, info, warn, error or fatal\)$/,
      freePort(),
      { BIGFLEET_LOG_LEVEL: "verbose" },
    );
    await assertRefused(
      fakeProviderArgs({ seed: 8, extra: ["--log-level=loud"] }),
      /^error: --log-level: unknown log level "loud"/,
    );
  },
});

Deno.test({
  name: "[startup] --log-format=text writes one readable line per record, fields as key=value",
  async fn() {
    const p = await startProvider({
      args: fakeProviderArgs({ seed: 8, extra: ["--log-format=text"] }),
    });
    const h = new Harness(p.addr);
    try {
      await h.walkToIdle();
      assert.match(
        await waitForServingLine(p),
        /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z INFO {2}bigfleet: serving CapacityProvider .*\bproxmox_backend=fake\b.*\bmachines=8\b/,
      );
      const lines = p.stderr().split("\n").filter((l) => l.trim() !== "");
      assert.ok(lines.every((l) => !isJsonRecord(l)), "no JSON line");
      assert.ok(
        lines.every((l) => /^\S+Z (TRACE|DEBUG|INFO |WARN |ERROR|FATAL) bigfleet[\w.-]*: /.test(l)),
        lines.join("\n"),
      );
    } finally {
      h.close();
      await p.stop();
    }
  },
});

/** Flags of the real backend against `sim`, with `nodes` (the later flag wins); the token under `dir`. */
async function simArgs(sim: Simulator, dir: string, nodes: string): Promise<string[]> {
  const token = `${dir}/token`;
  await Deno.writeTextFile(token, sim.tokenSecret + "\n");
  return [...providerArgs(sim, token), `--nodes=${nodes}`, "--reconcile-interval=0"];
}

Deno.test({
  name: "[startup] a --nodes entry the cluster lacks is refused, naming it and the nodes there are",
  async fn() {
    const sim = await startSimulator({});
    const dir = await Deno.makeTempDir({ prefix: "bfconf-nodes-" });
    try {
      await assertRefused(
        await simArgs(sim, dir, "pve1,pve9"),
        /^error: node "pve9" in --nodes is not a node of this Proxmox cluster \(it has pve1, pve2\): correct --nodes/,
      );
      assert.equal(sim.requests.filter((q) => q.method !== "GET").length, 0, "nothing was created");
    } finally {
      await sim.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name:
    "[startup] when the node list does not answer: a WARN, serving, a check once it answers; an unknown node then fails its zone's Creates clearly",
  async fn() {
    const sim = await startSimulator({});
    // GET /nodes answers like a proxy that lost the node (596) until the rule is cleared.
    sim.faults.http596 = [{ path: /^\/nodes$/, method: "GET", count: 1_000, delayMs: 0 }];
    const dir = await Deno.makeTempDir({ prefix: "bfconf-nodes-" });
    const p = await startProvider({ args: await simArgs(sim, dir, "pve1,pve9") });
    const h = new Harness(p.addr);
    try {
      const records = () => p.stderr().split("\n").filter(isJsonRecord).map((l) => JSON.parse(l));
      await waitFor(
        "the WARN that --nodes could not be checked",
        () =>
          records().some((r) =>
            r.level === "WARN" && /could not list the cluster's nodes/.test(r.message)
          ),
      );
      sim.faults.http596 = [];
      await waitFor(
        "the ERROR once the check ran",
        () =>
          records().some((r) =>
            r.level === "ERROR" && /node "pve9" in --nodes is not a node/.test(r.message)
          ),
        30_000,
      );
      const pve9 = (await h.list()).machines.find((m) => m.zone === "pve9")!;
      await h.create(pve9.id);
      const failed = await h.mustReach(pve9.id, St.FAILED);
      assert.match(
        failed.last_error,
        /^create failed: zone pve9: node "pve9" in --nodes is not a node of this Proxmox cluster \(it has pve1, pve2\)/,
      );
      // The zones that exist keep working.
      const pve1 = (await h.list()).machines.find((m) => m.zone === "pve1")!;
      await h.create(pve1.id);
      await h.mustReach(pve1.id, St.IDLE);
    } finally {
      h.close();
      await p.stop();
      await sim.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
