// `deno task conformance` as a provider author's CI runs it: against our own
// running provider (--target, plaintext and mTLS), against a provider that
// breaks the contract (the reports must say which behaviours failed), and in
// spawning mode with a provider command (durable and scale lanes included).

import assert from "node:assert/strict";
import {
  DEFAULT_PROVIDER_CMD,
  fakeProviderArgs,
  type ProviderProcess,
  REPO_ROOT,
  startProvider,
} from "../harness/mod.ts";
import { BASELINE_LANE, EXTENSION_LANE } from "../conformance/suite.ts";
import { startMutatingProxy } from "../conformance/mutating_proxy.ts";
import { RUNNER_FLAGS } from "../conformance/run.ts";
import { issueCert, makeCa } from "../pvesim/certs.ts";
import { lines } from "./helpers.ts";

const opts = { sanitizeOps: false, sanitizeResources: false };

interface Run {
  code: number;
  stdout: string;
  stderr: string;
  json: Record<string, unknown> & {
    outcome: string;
    summary: Record<string, number>;
    behaviors: { id: string; lane: string; status: string; message: string | null }[];
  };
  junit: string;
}

/** `deno task conformance <args>` from the repository root, reports in a temp dir. */
async function conformance(args: string[], reports = true): Promise<Run> {
  const dir = await Deno.makeTempDir({ prefix: "bf-conf-run-" });
  try {
    const paths = reports
      ? [`--junit=${dir}/out/junit.xml`, "--json", `${dir}/out/report.json`]
      : [];
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["task", "conformance", ...args, ...paths],
      cwd: REPO_ROOT,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    const read = (p: string) => Deno.readTextFile(p).catch(() => "");
    const json = await read(`${dir}/out/report.json`);
    return {
      code: out.code,
      stdout: new TextDecoder().decode(out.stdout),
      stderr: new TextDecoder().decode(out.stderr),
      json: json ? JSON.parse(json) : undefined,
      junit: await read(`${dir}/out/junit.xml`),
    };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** testcase name → failed?, from the JUnit text, per testsuite. */
function junitCases(xml: string): Map<string, { suite: string; failed: boolean }> {
  const out = new Map<string, { suite: string; failed: boolean }>();
  for (const suite of xml.matchAll(/<testsuite name="([^"]+)"[^>]*>([\s\S]*?)<\/testsuite>/g)) {
    for (
      const c of suite[2].matchAll(
        /<testcase [^>]*name="([^"]+)"[^>]*?(\/>|>([\s\S]*?)<\/testcase>)/g,
      )
    ) {
      const name = c[1].replaceAll("&quot;", '"').replaceAll("&lt;", "<").replaceAll("&gt;", ">")
        .replaceAll("&amp;", "&");
      out.set(name, { suite: suite[1], failed: (c[3] ?? "").includes("<failure") });
    }
  }
  return out;
}

const SUITE = [...BASELINE_LANE, ...EXTENSION_LANE];

Deno.test({
  name: "conformance --target: every baseline and extension behaviour, by id, in both reports",
  ...opts,
  async fn() {
    const proc = await startProvider({ args: fakeProviderArgs({ seed: 256 }) });
    try {
      const r = await conformance([`--target=${proc.addr}`, "--seed=7"]);
      assert.equal(r.code, 0, `${r.stdout.slice(-3000)}\n${r.stderr}`);
      assert.ok(
        r.stdout.includes(
          `conformance passed: ${SUITE.length} passed, 0 failed, 0 skipped, 0 missing`,
        ),
        r.stdout.slice(-500),
      );
      assert.equal(r.json.outcome, "passed");
      assert.equal(r.json.target, proc.addr);
      assert.deepEqual(r.json.lanes, ["baseline", "extension"]);
      const ids = r.json.behaviors.map((b) => b.id);
      assert.deepEqual(ids, SUITE.map((b) => b.id), "every behaviour, in run order");
      for (const b of r.json.behaviors) {
        assert.equal(b.status, "passed", b.id);
        assert.equal(b.lane, b.id.startsWith("baseline ") ? "baseline" : "extension");
      }
      const cases = junitCases(r.junit);
      assert.equal(cases.size, SUITE.length, "no stop-the-provider case against a target");
      for (const b of SUITE) {
        const c = cases.get(`${b.id} ${b.title}`);
        assert.ok(c, `${b.id} in the JUnit report`);
        assert.equal(c.suite, b.id.startsWith("baseline ") ? "baseline" : "extension");
        assert.equal(c.failed, false, b.id);
      }
      assert.equal(proc.exitStatus(), undefined, "the target is still serving");
    } finally {
      await proc.stop();
    }
  },
});

Deno.test({
  name:
    "conformance --target: a provider that breaks the contract fails, and the reports name the behaviours",
  ...opts,
  async fn() {
    const proc = await startProvider({ args: fakeProviderArgs({ seed: 256 }) });
    // max_results ignored: baseline ListMaxResults and B902 must catch it.
    const proxy = await startMutatingProxy(proc.addr, {
      list: (f, fwd) => fwd({ ...f, max_results: 0 }),
    });
    try {
      const r = await conformance([
        `--target=${proxy.addr}`,
        "--run",
        "^(baseline ListMaxResults|B902|B101) ",
      ]);
      assert.equal(r.code, 1, r.stdout.slice(-3000));
      assert.match(r.stdout, /conformance failed: 1 passed, 2 failed, 0 skipped, 0 missing/);
      assert.equal(r.json.outcome, "failed");
      const by = new Map(r.json.behaviors.map((b) => [b.id, b]));
      assert.deepEqual([...by.keys()].sort(), ["B101", "B902", "baseline ListMaxResults"]);
      assert.equal(by.get("B101")!.status, "passed");
      for (const id of ["B902", "baseline ListMaxResults"]) {
        assert.equal(by.get(id)!.status, "failed", id);
        assert.ok((by.get(id)!.message ?? "").length > 0, `${id} says why`);
      }
      const cases = junitCases(r.junit);
      assert.equal([...cases.values()].filter((c) => c.failed).length, 2);
    } finally {
      proxy.stop();
      await proc.stop();
    }
  },
});

Deno.test({
  name:
    "conformance --target over mTLS (--tls-ca, --tls-cert, --tls-key, --tls-server-name); a refused client fails fast",
  ...opts,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "bf-conf-tls-" });
    const serverCa = await makeCa(dir, "conf-server-root");
    const clientCa = await makeCa(dir, "conf-client-root");
    const server = await issueCert(serverCa, {
      cn: "provider",
      sans: ["DNS:provider.test"],
      usage: "server",
      name: "provider",
    });
    const client = await issueCert(clientCa, { cn: "ci", usage: "client", name: "ci" });
    let proc: ProviderProcess | undefined;
    try {
      proc = await startProvider({
        args: fakeProviderArgs({
          seed: 64,
          extra: [
            `--tls-cert=${server.certFile}`,
            `--tls-key=${server.keyFile}`,
            `--tls-ca=${clientCa.certFile}`,
          ],
        }),
      });
      const tls = [
        `--target=${proc.addr}`,
        `--tls-ca=${serverCa.certFile}`,
        "--tls-server-name=provider.test",
      ];
      const ok = await conformance([
        ...tls,
        `--tls-cert=${client.certFile}`,
        `--tls-key=${client.keyFile}`,
        "--run=^(baseline FullLifecycle|B101|B901) ",
      ]);
      assert.equal(ok.code, 0, ok.stdout.slice(-3000));
      assert.deepEqual(ok.json.behaviors.map((b) => [b.id, b.status]), [
        ["baseline FullLifecycle", "passed"],
        ["B101", "passed"],
        ["B901", "passed"],
      ]);
      // Without a client certificate the provider refuses the handshake: one
      // line and exit 1 before any behaviour runs, not a run of timeouts.
      const refused = await conformance(tls);
      assert.equal(refused.code, 1);
      assert.match(
        lines(refused.stderr).at(-1)!,
        /^error: cannot list machines on 127\.0\.0\.1:\d+: /,
      );
      assert.equal(refused.json, undefined, "no report for a run that never started");
    } finally {
      await proc?.stop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "conformance --provider-cmd: boots the command itself, with the durable and scale lanes",
  ...opts,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "bf-conf-cmd-" });
    try {
      // A wrapper that records each boot's flags, then becomes the provider
      // (exec keeps the pid, so the lanes' SIGKILL reaches the provider).
      const argsLog = `${dir}/boots.log`;
      await Deno.writeTextFile(
        `${dir}/provider.sh`,
        `echo "$*" >> ${argsLog}\nexec ${DEFAULT_PROVIDER_CMD.join(" ")} "$@"\n`,
      );
      const r = await conformance([
        `--provider-cmd=sh ${dir}/provider.sh`,
        "--lanes",
        "baseline,durable,scale",
        "--run=^baseline FullLifecycle ",
        "--seed-count=40",
        "--scale-seed=300",
        "--soak=1s",
      ]);
      assert.equal(r.code, 0, `${r.stdout.slice(-4000)}\n${r.stderr}`);
      assert.equal(r.json.provider_cmd, `sh ${dir}/provider.sh`);
      const status = new Map(r.json.behaviors.map((b) => [b.id, `${b.lane} ${b.status}`]));
      assert.equal(status.get("baseline FullLifecycle"), "baseline passed");
      for (let i = 1; i <= 7; i++) assert.equal(status.get(`B100${i}`), "durable passed");
      for (let i = 1; i <= 9; i++) assert.equal(status.get(`B110${i}`), "scale passed");
      assert.equal(r.json.behaviors.length, 1 + 7 + 9);
      const boots = lines(await Deno.readTextFile(argsLog));
      assert.ok(boots.some((b) => b.includes("--seed-count=40")), boots.join("\n"));
      assert.ok(boots.some((b) => b.includes("--seed-count=300")), boots.join("\n"));
      assert.ok(
        boots.some((b) => b.includes("--state=")),
        "the durable lane restarts on a state file",
      );
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("conformance: usage errors exit 2 with one line; --help lists every flag", async () => {
  const cases: [string[], RegExp][] = [
    [
      ["--target=127.0.0.1:1", "--lanes=durable"],
      /^error: --lanes: durable restarts .* needs --provider-cmd/,
    ],
    [
      ["--lanes=extensoin"],
      /^error: --lanes: unknown lane "extensoin" \(did you mean "extension"\?\)/,
    ],
    [
      ["--target=a:1", "--provider-cmd=x"],
      /^error: --target and --provider-cmd exclude each other$/,
    ],
    [["--tls-ca=/x.pem"], /^error: --tls flags apply to --target/],
    [["--run=("], /^error: --run: /],
    [["--soak=5"], /^error: --soak: want e\.g\. 5s/],
    [["--target=nope"], /^error: --target: want HOST:PORT/],
    [["--junt=x"], /^error: unknown flag --junt \(did you mean --junit\?\)$/],
  ];
  for (const [args, re] of cases) {
    const r = await conformance(args, false);
    assert.equal(r.code, 2, `${args.join(" ")}: ${r.stderr}`);
    assert.match(lines(r.stderr).at(-1)!, re, args.join(" "));
  }
  const h = await conformance(["--help"], false);
  assert.equal(h.code, 0);
  for (const flag of Object.keys(RUNNER_FLAGS)) assert.match(h.stdout, new RegExp(`--${flag}\\b`));
});
