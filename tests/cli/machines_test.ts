// `machines list|get|watch` through the real entrypoint against a running
// provider (ours on the fake backend), against a proxy that answers unlike
// ours (any CapacityProvider), and over TLS and mTLS with real certificates.

import assert from "node:assert/strict";
import { parse as parseYaml } from "yaml";
import {
  type CapacityType,
  fakeProviderArgs,
  freePort,
  Harness,
  MachineState as St,
  type ProviderProcess,
  startProvider,
  waitFor,
} from "../harness/mod.ts";
import { startMutatingProxy } from "../conformance/mutating_proxy.ts";
import { issueCert, makeCa } from "../pvesim/certs.ts";
import { cli, lines, spawnCli } from "./helpers.ts";

const opts = { sanitizeOps: false, sanitizeResources: false };

interface Fleet {
  proc: ProviderProcess;
  h: Harness;
  idle: string;
  configured: string;
}

let fleetP: Promise<Fleet> | undefined;

/** One provider for the read-only checks: one machine IDLE, one CONFIGURED on "c1". */
function fleet(): Promise<Fleet> {
  return fleetP ??= (async () => {
    const proc = await startProvider({ args: fakeProviderArgs({ seed: 8, provider: "cli" }) });
    const h = new Harness(proc.addr);
    const idle = (await h.walkToIdle()).id;
    const configured = (await h.walkToConfigured("c1")).id;
    return { proc, h, idle, configured };
  })();
}

const target = (f: Fleet) => `--target=${f.proc.addr}`;

/** Counts events (Lists a proxy answered); a test waits for a count, bounded. */
class Counter {
  count = 0;

  bump(): void {
    this.count++;
  }

  async reach(n: number, what: string, timeoutMs = 20_000): Promise<void> {
    await waitFor(() => `${what} (${this.count} of ${n})`, () => this.count >= n, timeoutMs, 5);
  }
}

/** Rows of a table (header first) split on runs of 2+ spaces. */
function table(stdout: string): string[][] {
  return lines(stdout).map((l) => l.trim().split(/ {2,}/));
}

Deno.test({
  name: "machines list: a table with one row per machine, sorted by id, VM and cluster shown",
  ...opts,
  async fn() {
    const f = await fleet();
    const r = await cli(["machines", "list", target(f)]);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stderr, "");
    const [header, ...rows] = table(r.stdout);
    assert.deepEqual(header, ["ID", "STATE", "TYPE", "ZONE", "VM", "CLUSTER", "LAST ERROR"]);
    const all = (await f.h.list()).machines;
    assert.equal(rows.length, all.length);
    const ids = rows.map((r) => r[0]);
    assert.deepEqual(ids, [...ids].sort((a, b) => a.localeCompare(b, "en", { numeric: true })));
    for (const m of all) {
      const row = rows.find((r) => r[0] === m.id);
      assert.ok(row, m.id);
      assert.equal(row[2], m.instance_type);
      assert.equal(row[3], m.zone);
      assert.equal(row[4], m.host?.ref || "-");
      assert.equal(row[5], m.cluster || "-");
    }
    const idle = rows.find((r) => r[0] === f.idle)!;
    assert.equal(idle[1], "IDLE");
    assert.match(idle[4], /\S+\/\d+/, "VM is the host ref node/vmid");
    const conf = rows.find((r) => r[0] === f.configured)!;
    assert.deepEqual([conf[1], conf[5]], ["CONFIGURED", "c1"]);
  },
});

Deno.test({
  name: "machines list: --state (names, any case, comma list), --zone and --type filter",
  ...opts,
  async fn() {
    const f = await fleet();
    const ids = async (...args: string[]) => {
      const r = await cli(["machines", "list", target(f), "-o", "name", ...args]);
      assert.equal(r.code, 0, `${args.join(" ")}: ${r.stderr}`);
      return lines(r.stdout);
    };
    assert.deepEqual(await ids("--state", "idle"), [f.idle]);
    assert.deepEqual(await ids("--state=CONFIGURED"), [f.configured]);
    assert.deepEqual(await ids("-state", "MACHINE_STATE_IDLE"), [f.idle]);
    assert.deepEqual(
      (await ids("--state", "idle,configured")).sort(),
      [f.idle, f.configured].sort(),
    );
    const all = (await f.h.list()).machines;
    const inZone = all.filter((m) => m.zone === "pve-b").map((m) => m.id).sort();
    assert.ok(inZone.length > 0 && inZone.length < all.length);
    assert.deepEqual((await ids("--zone", "pve-b")).sort(), inZone);
    const ofType = all.filter((m) => m.instance_type === "pve.large").map((m) => m.id).sort();
    assert.ok(ofType.length > 0 && ofType.length < all.length);
    assert.deepEqual((await ids("--type", "pve.large")).sort(), ofType);
    const both = all.filter((m) => m.instance_type === "pve.large" && m.zone === "pve-b");
    assert.deepEqual(
      (await ids("--type", "pve.large", "--zone", "pve-b")).sort(),
      both.map((m) => m.id).sort(),
    );
    assert.deepEqual(await ids("--state", "failed"), [], "nothing FAILED: empty output");
  },
});

Deno.test({
  name:
    "machines list: nothing matched says so on stderr (stdout empty, exit 0); json stays a document",
  ...opts,
  async fn() {
    const f = await fleet();
    for (const output of ["table", "wide", "name"]) {
      const r = await cli([
        "machines",
        "list",
        target(f),
        "--state=failed",
        "--zone=pve-b",
        "-o",
        output,
      ]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stdout, "", output);
      assert.deepEqual(lines(r.stderr), [
        `No machines found on ${f.proc.addr} matching state failed, zone pve-b.`,
      ], output);
    }
    const j = await cli(["machines", "list", target(f), "--state=failed", "-o", "json"]);
    assert.equal(j.code, 0, j.stderr);
    assert.equal(j.stderr, "");
    assert.deepEqual(JSON.parse(j.stdout).machines, []);
  },
});

Deno.test({
  name: "machines list: -o json and -o yaml carry every field; wide adds columns; --no-headers",
  ...opts,
  async fn() {
    const f = await fleet();
    const r = await cli(["machines", "list", target(f), "-o", "json"]);
    assert.equal(r.code, 0, r.stderr);
    const doc = JSON.parse(r.stdout);
    assert.match(doc.revision, /^[A-Za-z0-9+/]+=*$/, "revision cursor, base64");
    const wire = (await f.h.list()).machines;
    assert.equal(doc.machines.length, wire.length);
    const conf = doc.machines.find((m: { id: string }) => m.id === f.configured);
    const w = wire.find((m) => m.id === f.configured)!;
    assert.deepEqual(Object.keys(conf).sort(), [
      "allocatable",
      "capacity_type",
      "cluster",
      "host",
      "id",
      "instance_type",
      "interruption_probability",
      "labels",
      "last_error",
      "price_per_hour",
      "resources",
      "shard_metadata",
      "state",
      "zone",
    ]);
    assert.equal(conf.state, "CONFIGURED");
    assert.equal(conf.capacity_type, "ON_DEMAND");
    assert.deepEqual(conf.host, w.host);
    assert.deepEqual(conf.resources, w.resources?.resources);
    assert.deepEqual(conf.allocatable, w.allocatable?.resources);
    assert.equal(conf.price_per_hour, w.price_per_hour);
    assert.equal(conf.cluster, "c1");

    const y = await cli(["machines", "list", target(f), "--output=yaml"]);
    assert.equal(y.code, 0, y.stderr);
    assert.deepEqual(parseYaml(y.stdout).machines, doc.machines);

    const wide = await cli(["machines", "list", target(f), "-o", "wide"]);
    assert.equal(wide.code, 0, wide.stderr);
    const [header, ...rows] = table(wide.stdout);
    assert.deepEqual(header, [
      "ID",
      "STATE",
      "TYPE",
      "ZONE",
      "VM",
      "CLUSTER",
      "CAPACITY",
      "PRICE/H",
      "RESOURCES",
      "LABELS",
      "LAST ERROR",
    ]);
    const row = rows.find((r) => r[0] === f.configured)!;
    assert.equal(row[6], "ON_DEMAND");
    assert.equal(Number(row[7]), w.price_per_hour);
    assert.equal(row[8], "cpu=1,memory=2Gi");

    const bare = await cli(["machines", "list", target(f), "--no-headers"]);
    assert.equal(bare.code, 0);
    assert.equal(lines(bare.stdout).length, wire.length);
    assert.ok(!bare.stdout.includes("LAST ERROR"));
  },
});

Deno.test({
  name: "machines get: one machine in every format; an unknown id exits 3; a missing id exits 2",
  ...opts,
  async fn() {
    const f = await fleet();
    const r = await cli(["machines", "get", f.configured, target(f)]);
    assert.equal(r.code, 0, r.stderr);
    const [header, row] = table(r.stdout);
    assert.equal(header[0], "ID");
    assert.deepEqual([row[0], row[1], row[5]], [f.configured, "CONFIGURED", "c1"]);

    const j = await cli(["machines", "get", target(f), "-o", "json", f.configured]);
    assert.equal(j.code, 0, j.stderr);
    const one = JSON.parse(j.stdout);
    const listed = JSON.parse((await cli(["machines", "list", target(f), "-o", "json"])).stdout);
    assert.deepEqual(one, listed.machines.find((m: { id: string }) => m.id === f.configured));
    const y = await cli(["machines", "get", target(f), "-o", "yaml", f.configured]);
    assert.deepEqual(parseYaml(y.stdout), one);
    const n = await cli(["machines", "get", target(f), "-o", "name", f.configured]);
    assert.equal(n.stdout, `${f.configured}\n`);

    const missing = await cli(["machines", "get", "cli/no/such/machine", target(f)]);
    assert.equal(missing.code, 3);
    assert.equal(missing.stdout, "");
    assert.deepEqual(lines(missing.stderr), [
      `error: machine "cli/no/such/machine" not found on ${f.proc.addr}`,
    ]);
    const none = await cli(["machines", "get", target(f)]);
    assert.equal(none.code, 2);
    assert.deepEqual(lines(none.stderr), ["error: machines get takes one machine id, got 0"]);
    const two = await cli(["machines", "get", "a", "b", target(f)]);
    assert.equal(two.code, 2);
  },
});

Deno.test({
  name:
    "machines: usage errors exit 2 with one line naming the flag; an unreachable provider exits 1",
  ...opts,
  async fn() {
    const cases: [string[], string][] = [
      [["list", "--state", "idel"], `error: --state: unknown state "idel" (did you mean "idle"?)`],
      [["list", "-o", "xml"], `error: --output: want table, wide, json, yaml or name, got "xml"`],
      [["list", "--target", "nohost"], `error: --target: want HOST:PORT`],
      [["list", "--target", "h:99999"], `error: --target: want HOST:PORT`],
      [["list", "--timeout", "0"], `error: --timeout: must be more than 0`],
      [["list", "--timeout", "soon"], `error: --timeout:`],
      [["watch", "--interval", "0s"], `error: --interval: must be more than 0`],
      [["list", "--tls-cert", "/x.pem"], `error: --tls-cert: given without --tls-key`],
      [["list", "--tls-key", "/x.pem"], `error: --tls-key: given without --tls-cert`],
      [["list", "--tls-server-name", "a"], `error: --tls-server-name: needs TLS`],
      [["list", "--tls-ca", "/no/such/ca.pem"], `error: --tls-ca: cannot read "/no/such/ca.pem"`],
      [["list", "--targt=x:1"], `error: unknown flag --targt (did you mean --target?)`],
      [["list", "stray"], `error: unexpected argument "stray"`],
    ];
    for (const [args, want] of cases) {
      const r = await cli(["machines", ...args]);
      assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
      const got = lines(r.stderr);
      assert.equal(got.length, 1, args.join(" "));
      assert.ok(got[0].startsWith(want), `${args.join(" ")}: ${got[0]}`);
    }
    const port = freePort();
    for (const sub of [["list"], ["get", "x"], ["watch"]]) {
      const r = await cli(["machines", ...sub, `--target=127.0.0.1:${port}`, "--timeout=3s"]);
      assert.equal(r.code, 1, `${sub[0]}: ${r.stderr}`);
      assert.match(
        lines(r.stderr)[0],
        new RegExp(`^error: (List|Get) on 127\\.0\\.0\\.1:${port} failed: UNAVAILABLE \\(14\\): `),
      );
    }
  },
});

Deno.test({
  name: "machines watch: prints the fleet, then each change (table and json lines); SIGINT exits 0",
  ...opts,
  async fn() {
    const proc = await startProvider({
      args: fakeProviderArgs({ seed: 4, provider: "watch", fakeDelay: "300ms" }),
    });
    const h = new Harness(proc.addr);
    try {
      const tableWatch = spawnCli([
        "machines",
        "watch",
        `--target=${proc.addr}`,
        "--interval=50ms",
      ]);
      const jsonWatch = spawnCli([
        "machines",
        "watch",
        `--target=${proc.addr}`,
        "--interval",
        "50ms",
        "-o",
        "json",
        "--zone=pve-a",
      ]);
      await tableWatch.waitForLine((l) => l.startsWith("ID "), "the header");
      const all = (await h.list()).machines;
      const m = all.find((x) => x.zone === "pve-a")!;
      for (const x of all) {
        await tableWatch.waitForLine((l) => l.startsWith(`${x.id} `), `initial row ${x.id}`);
      }
      for (const x of all.filter((x) => x.zone === "pve-a")) {
        await jsonWatch.waitForLine((l) => JSON.parse(l).id === x.id, `initial object ${x.id}`);
      }
      const before = tableWatch.lines().length;
      await h.create(m.id);
      await h.mustReach(m.id, St.IDLE);
      const idleRow = await tableWatch.waitForLine(
        (l) => l.startsWith(`${m.id} `) && /\sIDLE\s/.test(l),
        "the IDLE row",
      );
      assert.match(idleRow, /\s\S+\/\d+\s/, "with its VM");
      const idleObj = JSON.parse(
        await jsonWatch.waitForLine(
          (l) => JSON.parse(l).id === m.id && JSON.parse(l).state === "IDLE",
          "the IDLE object",
        ),
      );
      assert.ok(idleObj.host.ref.length > 0);
      // Only the changed machine is printed again, never the unchanged ones.
      const later = tableWatch.lines().slice(before);
      assert.ok(
        later.length >= 1 && later.every((l) => l.startsWith(`${m.id} `)),
        later.join("\n"),
      );
      // The zone filter holds for changes too.
      assert.ok(jsonWatch.lines().every((l) => JSON.parse(l).zone === "pve-a"));

      for (const w of [tableWatch, jsonWatch]) {
        w.kill("SIGINT");
        const st = await w.status;
        assert.equal(st.code, 0, w.stderr());
        assert.equal(w.stderr(), "");
      }
    } finally {
      h.close();
      await proc.stop();
    }
  },
});

Deno.test({
  name:
    "machines watch: a provider's graceful stop ends it with exit 1 and the lost call, never a crash (its GOAWAY never reaches node:http2)",
  ...opts,
  async fn() {
    // MALLOC_PERTURB_ fills freed memory, so the use-after-free a GOAWAY
    // triggers in Deno's node:http2 crashes every time instead of by luck
    // (docs/security.md#the-http2-frame-guard).
    for (const round of [1, 2]) {
      const proc = await startProvider({ args: fakeProviderArgs({ seed: 2, provider: "gw" }) });
      const w = spawnCli(["machines", "watch", `--target=${proc.addr}`, "--interval=50ms"], {
        env: { MALLOC_PERTURB_: "165" },
      });
      try {
        await w.waitForLine((l) => l.startsWith("gw/"), "a first row");
        proc.kill("SIGTERM");
        assert.equal((await proc.exited).code, 0, "the provider stopped gracefully");
        const st = await w.status;
        assert.equal(st.signal, null, `round ${round}: watch died of ${st.signal}`);
        assert.equal(st.code, 1, w.stderr());
        assert.match(
          w.stderr(),
          new RegExp(`^error: List on 127\\.0\\.0\\.1:${proc.port} failed: UNAVAILABLE \\(14\\): `),
        );
      } finally {
        w.kill("SIGKILL");
        await proc.stop();
      }
    }
  },
});

Deno.test({
  name: "machines watch: each List after the first passes back the revision it was given (-o yaml)",
  ...opts,
  async fn() {
    const f = await fleet();
    const seen: { since: string; revision: string }[] = [];
    const lists = new Counter();
    const hex = (b?: Uint8Array) => [...(b ?? [])].map((x) => x.toString(16)).join(".");
    const proxy = await startMutatingProxy(f.proc.addr, {
      list: async (lf, fwd) => {
        const l = await fwd(lf);
        seen.push({ since: hex(lf.since_revision), revision: hex(l.revision) });
        lists.bump();
        return l;
      },
    });
    const w = spawnCli([
      "machines",
      "watch",
      `--target=${proxy.addr}`,
      "--interval=50ms",
      "-o=yaml",
    ]);
    try {
      await w.waitForLine((l) => l === `id: ${f.idle}`, "the idle machine's document");
      await lists.reach(4, "four Lists through the proxy");
      assert.equal(seen[0].since, "", "the first List is a full one");
      for (let i = 1; i < seen.length; i++) {
        assert.equal(seen[i].since, seen[i - 1].revision, `List ${i} passes the cursor back`);
        assert.notEqual(seen[i].since, "");
      }
      w.kill("SIGINT");
      assert.equal((await w.status).code, 0);
      const docs = w.lines().join("\n").split(/^---$/m).filter((d) => d.trim() !== "");
      assert.equal(docs.length, (await f.h.list()).machines.length, "one document per machine");
      assert.ok(
        docs.map((d) => parseYaml(d)).some((m) => m.id === f.configured && m.cluster === "c1"),
      );
    } finally {
      w.kill("SIGKILL");
      proxy.stop();
    }
  },
});

Deno.test({
  name:
    "machines: any CapacityProvider: foreign states and capacity, hostile text, no revision cursor",
  ...opts,
  async fn() {
    const f = await fleet();
    const victim = f.idle;
    // A provider unlike ours: an enum value this proto lacks, a last_error with
    // terminal escapes and newlines, and List without a revision cursor.
    const hostile = "\u001b[31mboom\u001b[0m\nsecond line " + "x".repeat(200);
    const lists = new Counter();
    const proxy = await startMutatingProxy(f.proc.addr, {
      machine: (m) =>
        m.id === victim
          ? { ...m, state: St.FAILED, last_error: hostile, capacity_type: 42 as CapacityType }
          : m,
      list: async (lf, fwd) => {
        const l = await fwd({ ...lf, since_revision: undefined });
        lists.bump();
        return { ...l, revision: new Uint8Array() };
      },
    });
    try {
      const r = await cli(["machines", "list", `--target=${proxy.addr}`]);
      assert.equal(r.code, 0, r.stderr);
      assert.ok(!r.stdout.includes("\u001b"), "no escape sequence reaches the terminal");
      const rows = table(r.stdout);
      assert.equal(rows.length, (await f.h.list()).machines.length + 1, "one line per machine");
      const row = rows.find((r) => r[0] === victim)!;
      assert.equal(row[1], "FAILED");
      const err = row[6];
      assert.ok(err.startsWith("[31mboom [0m second line xxx"), err);
      assert.ok(err.endsWith("…") && [...err].length === 60, err);

      const j = await cli(["machines", "get", victim, `--target=${proxy.addr}`, "-o", "json"]);
      const one = JSON.parse(j.stdout);
      assert.equal(one.last_error, hostile, "json keeps the text exact");
      assert.equal(one.capacity_type, "42");
      assert.equal(one.state, "FAILED");
      const wide = await cli(["machines", "get", victim, `--target=${proxy.addr}`, "-o", "wide"]);
      assert.equal(table(wide.stdout)[1][6], "42");

      // No cursor: watch lists in full each time but prints only what changed.
      const w = spawnCli(["machines", "watch", `--target=${proxy.addr}`, "--interval=50ms"]);
      try {
        const n = (await f.h.list()).machines.length;
        await w.waitForLine((l) => l.startsWith(`${victim} `), "the victim row");
        // Ten more full Lists answered, and the last one's output (none) had its time.
        await lists.reach(lists.count + 10, "ten more full Lists");
        await lists.reach(lists.count + 1, "one List after them");
        assert.equal(w.lines().length, n + 1, w.lines().join("\n"));
      } finally {
        w.kill("SIGTERM");
        assert.equal((await w.status).code, 0);
      }
    } finally {
      proxy.stop();
    }
  },
});

Deno.test({
  name:
    "machines: TLS to an IP target verifies its IP SAN; --tls-server-name overrides the name; a wrong name, CA or no client certificate is refused",
  ...opts,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "bf-cli-tls-" });
    const serverCa = await makeCa(dir, "cli-server-root");
    const clientCa = await makeCa(dir, "cli-client-root");
    const otherCa = await makeCa(dir, "cli-other-root");
    // The README's case: the provider's certificate names its IP (and a DNS name).
    const withIp = await issueCert(serverCa, {
      cn: "provider",
      sans: ["DNS:provider.test", "IP:127.0.0.1"],
      usage: "server",
      name: "provider-ip",
    });
    // Only a DNS name: dialled by IP it must be refused unless the name is given.
    const dnsOnly = await issueCert(serverCa, {
      cn: "provider",
      sans: ["DNS:provider.test"],
      usage: "server",
      name: "provider-dns",
    });
    const operator = await issueCert(clientCa, { cn: "operator", usage: "client", name: "op" });
    const serve = (c: typeof withIp) => [`--tls-cert=${c.certFile}`, `--tls-key=${c.keyFile}`];
    const tls = await startProvider({ args: fakeProviderArgs({ seed: 2, extra: serve(withIp) }) });
    const mtls = await startProvider({
      args: fakeProviderArgs({
        seed: 2,
        extra: [...serve(dnsOnly), `--tls-ca=${clientCa.certFile}`],
      }),
    });
    const list = (p: ProviderProcess, ...args: string[]) =>
      cli(["machines", "list", `--target=${p.addr}`, "-o", "name", "--timeout=5s", ...args]);
    const ca = `--tls-ca=${serverCa.certFile}`;
    const refused = (r: { code: number; stderr: string }, why: RegExp, what: string) => {
      assert.equal(r.code, 1, `${what}: ${r.stderr}`);
      assert.match(r.stderr, /^error: List on 127\.0\.0\.1:\d+ failed: UNAVAILABLE \(14\): /, what);
      assert.match(r.stderr, why, what);
      assert.doesNotMatch(r.stderr, /servername must not be an IP/, what);
    };
    try {
      for (
        const name of [[], ["--tls-server-name=127.0.0.1"], ["--tls-server-name=provider.test"]]
      ) {
        const ok = await list(tls, ca, ...name);
        assert.equal(ok.code, 0, `${name.join(" ") || "the target's IP"}: ${ok.stderr}`);
        assert.equal(lines(ok.stdout).length, 2);
      }
      const altname = /does not match certificate's altnames/;
      refused(await list(tls, ca, "--tls-server-name=wrong.test"), altname, "a wrong name");
      refused(await list(tls, `--tls-ca=${otherCa.certFile}`), /certificate/i, "another CA");
      // The system trust store does not know our private CA.
      refused(await list(tls, "--tls", "--tls-server-name=provider.test"), /certificate/i, "--tls");
      // Plaintext against a TLS listener.
      assert.equal((await list(tls)).code, 1);

      const client = [`--tls-cert=${operator.certFile}`, `--tls-key=${operator.keyFile}`];
      refused(await list(mtls, ca, ...client), altname, "an IP the certificate does not name");
      const named = [ca, "--tls-server-name=provider.test"];
      const mOk = await list(mtls, ...named, ...client);
      assert.equal(mOk.code, 0, mOk.stderr);
      assert.equal(lines(mOk.stdout).length, 2);
      const noCert = await list(mtls, ...named);
      assert.equal(noCert.code, 1, "no client certificate, no answer");
      const get = await cli([
        "machines",
        "get",
        lines(mOk.stdout)[0],
        `--target=${mtls.addr}`,
        ...named,
        ...client,
      ]);
      assert.equal(get.code, 0, get.stderr);
    } finally {
      await tls.stop();
      await mtls.stop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "machines: stop the shared provider",
  ...opts,
  async fn() {
    if (!fleetP) return;
    const f = await fleetP;
    f.h.close();
    await f.proc.stop();
  },
});
