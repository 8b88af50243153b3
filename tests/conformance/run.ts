// `deno task conformance`: the conformance suite as a tool any provider's CI
// can run. Against a running provider (--target, plaintext, TLS or mTLS) it
// runs the upstream baseline and the extension lane, everything that needs no
// restart; with a provider command (or this repository's own provider) it
// boots instances itself and can add the durable and scale lanes. It runs
// `deno test` on the lane files, then writes a JUnit XML and a JSON report
// keyed by behaviour id. Exit 0 only when every behaviour passed.

import { nearest, parseArgv } from "../../src/config/flags.ts";
import { ConfigError } from "../../src/config/types.ts";
import { forFlag, quote } from "../../src/config/errors.ts";
import { checkTarget, ProviderReader } from "../../src/client/client.ts";
import {
  type Command,
  EXIT_FAILURE,
  EXIT_OK,
  EXIT_USAGE,
  fail,
  write,
} from "../../src/cli/command.ts";
import { clientChannel } from "../../src/client/credentials.ts";
import { helpText } from "../../src/cli/help.ts";
import { VERSION } from "../../src/version.ts";
import { REPO_ROOT } from "../harness/process.ts";
import {
  ENV,
  expectedBehaviours,
  type Lane,
  LANE_FILES,
  LANES,
  SPAWN_ONLY,
} from "./runner/lanes.ts";
import { classify, junitXml, parseDenoJunit, type Report } from "./runner/report.ts";

const PROVIDER = "Provider under test";
const TLS = "TLS to --target";
const RUN = "What runs";
const REPORTS = "Reports";

export const RUNNER_FLAGS = {
  target: {
    kind: "string",
    default: "",
    topic: PROVIDER,
    arg: "HOST:PORT",
    none: "boot one",
    help: "a running provider: the baseline and extension lanes run against it",
  },
  "provider-cmd": {
    kind: "string",
    default: "",
    topic: PROVIDER,
    arg: "CMD",
    none: "this repository's main.ts under deno run",
    help: "command that starts a provider (split on spaces; the runner appends its flags)",
  },
  "seed-count": {
    kind: "string",
    default: "256",
    topic: PROVIDER,
    arg: "N",
    help: "--seed-count of the instance booted for the baseline and extension lanes",
  },
  tls: {
    kind: "bool",
    default: false,
    topic: TLS,
    help: "use TLS, verifying the provider with the system trust store",
  },
  "tls-ca": {
    kind: "string",
    default: "",
    topic: TLS,
    arg: "PATH",
    help: "PEM CA bundle that verifies the provider's certificate (implies --tls)",
  },
  "tls-cert": {
    kind: "string",
    default: "",
    topic: TLS,
    arg: "PATH",
    help: "PEM client certificate for mTLS, with --tls-key (implies --tls)",
  },
  "tls-key": {
    kind: "string",
    default: "",
    topic: TLS,
    arg: "PATH",
    help: "PEM private key for --tls-cert",
  },
  "tls-server-name": {
    kind: "string",
    default: "",
    topic: TLS,
    arg: "NAME",
    none: "the target's host",
    help: "name the provider's certificate must carry",
  },
  lanes: {
    kind: "string",
    default: "",
    topic: RUN,
    arg: "LIST",
    none: "baseline,extension with --target, else all four",
    help: "lanes to run: baseline, extension, durable, scale",
  },
  run: {
    kind: "string",
    default: "",
    topic: RUN,
    arg: "REGEX",
    none: "all",
    help: "only baseline and extension behaviours whose id or title matches",
  },
  seed: {
    kind: "string",
    default: "1",
    topic: RUN,
    arg: "N",
    help: "seed of the property-based behaviours (B12xx)",
  },
  "scale-seed": {
    kind: "string",
    default: "4000",
    topic: RUN,
    arg: "N",
    help: "machines the scale lane's instance is seeded with",
  },
  soak: {
    kind: "string",
    default: "5s",
    topic: RUN,
    arg: "DURATION",
    help: "scale lane soak window (ms, s or m)",
  },
  junit: {
    kind: "string",
    default: "",
    topic: REPORTS,
    arg: "PATH",
    none: "none",
    help: "write a JUnit XML report (one suite per lane, testcases named by behaviour id)",
  },
  json: {
    kind: "string",
    default: "",
    topic: REPORTS,
    arg: "PATH",
    none: "none",
    help: "write a JSON report with every behaviour's id, lane, status and message",
  },
} as const;

const RUNNER: Command = {
  name: "conformance",
  summary: "run the conformance suite",
  usage: "[flags]",
  description: "Runs the BigFleet CapacityProvider conformance suite against a running provider\n" +
    "(--target) or against instances it boots (--provider-cmd, else this repository's provider).",
  flags: RUNNER_FLAGS,
  footer:
    "Exit codes: 0 every behaviour passed, 1 a behaviour failed or has no result, 2 usage.\n" +
    "The target should be a fresh instance with at least 256 SPECULATIVE machines.",
};

interface Plan {
  target: string;
  lanes: Set<Lane>;
  run: RegExp | null;
  env: Record<string, string>;
  junit: string;
  json: string;
}

function integer(text: string): string {
  if (!/^\d+$/.test(text.trim())) throw new Error(`want a whole number, got ${quote(text)}`);
  return text.trim();
}

function plan(v: Record<keyof typeof RUNNER_FLAGS, string | boolean>): Plan {
  const target = String(v.target);
  if (target !== "") forFlag("target", () => checkTarget(target));
  const s = (k: keyof typeof RUNNER_FLAGS) => String(v[k]);
  if (target !== "" && s("provider-cmd") !== "") {
    throw new ConfigError("--target and --provider-cmd exclude each other");
  }
  const tlsGiven = v.tls === true || ["tls-ca", "tls-cert", "tls-key", "tls-server-name"]
    .some((k) => s(k as keyof typeof RUNNER_FLAGS) !== "");
  if (tlsGiven && target === "") {
    throw new ConfigError("--tls flags apply to --target (a booted provider serves plaintext)");
  }
  const lanes = new Set<Lane>();
  const wanted = s("lanes") === ""
    ? (target === "" ? [...LANES] : ["baseline", "extension"])
    : s("lanes").split(",").map((l) => l.trim()).filter((l) => l !== "");
  for (const l of wanted) {
    const lane = LANES.find((x) => x === l);
    if (!lane) {
      const hint = nearest(l, LANES);
      throw new ConfigError(
        `--lanes: unknown lane ${quote(l)}${hint ? ` (did you mean ${quote(hint)}?)` : ""}; want ${
          LANES.join(", ")
        }`,
      );
    }
    if (target !== "" && SPAWN_ONLY.includes(lane)) {
      throw new ConfigError(
        `--lanes: ${lane} restarts or freshly boots the provider; it needs --provider-cmd, not --target`,
      );
    }
    lanes.add(lane);
  }
  if (lanes.size === 0) throw new ConfigError("--lanes: no lane given");
  const run = s("run") === "" ? null : forFlag("run", () => new RegExp(s("run")));
  const env: Record<string, string> = {
    [ENV.lanes]: [...lanes].join(","),
    [ENV.run]: s("run"),
    [ENV.seedCount]: forFlag("seed-count", () => integer(s("seed-count"))),
    BFCONF_SEED: forFlag("seed", () => integer(s("seed"))),
    BFCONF_SCALE_SEED: forFlag("scale-seed", () => integer(s("scale-seed"))),
    BFCONF_SOAK: forFlag("soak", () => {
      if (!/^\d+(\.\d+)?(ms|s|m)$/.test(s("soak"))) {
        throw new Error(`want e.g. 5s, 500ms or 1m, got ${quote(s("soak"))}`);
      }
      return s("soak");
    }),
  };
  if (s("provider-cmd") !== "") env.BFCONF_PROVIDER_CMD = s("provider-cmd");
  if (target !== "") {
    Object.assign(env, {
      [ENV.target]: target,
      [ENV.tls]: String(v.tls),
      [ENV.tlsCa]: s("tls-ca"),
      [ENV.tlsCert]: s("tls-cert"),
      [ENV.tlsKey]: s("tls-key"),
      [ENV.tlsServerName]: s("tls-server-name"),
    });
  }
  return { target, lanes, run, env, junit: s("junit"), json: s("json") };
}

/** One List before a long run: an unreachable or misconfigured target fails in seconds. */
async function probe(p: Plan): Promise<string | null> {
  const channel = await clientChannel({
    tls: p.env[ENV.tls] === "true",
    caFile: p.env[ENV.tlsCa],
    certFile: p.env[ENV.tlsCert],
    keyFile: p.env[ENV.tlsKey],
    serverName: p.env[ENV.tlsServerName],
  });
  const reader = new ProviderReader(p.target, channel, 10_000);
  try {
    await reader.list([]);
    return null;
  } catch (e) {
    return e instanceof Error ? e.message : String(e);
  } finally {
    reader.close();
  }
}

async function runLanes(p: Plan): Promise<{ raw: string; code: number }> {
  const junitTmp = await Deno.makeTempFile({ prefix: "bfconf-", suffix: ".xml" });
  const files = [...new Set([...p.lanes].map((l) => `tests/conformance/${LANE_FILES[l]}`))];
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "test",
      "--allow-net",
      "--allow-read",
      "--allow-write",
      "--allow-env",
      "--allow-sys",
      "--allow-run",
      "--no-check",
      `--junit-path=${junitTmp}`,
      ...files,
    ],
    cwd: REPO_ROOT,
    env: p.env,
    stdin: "null",
    stdout: "inherit",
    stderr: "inherit",
  }).spawn();
  const status = await child.status;
  let raw = "";
  try {
    raw = await Deno.readTextFile(junitTmp);
  } catch { /* the run died before writing it: every behaviour is missing */ }
  await Deno.remove(junitTmp).catch(() => {});
  return { raw, code: status.code };
}

function jsonReport(p: Plan, r: Report, startedAt: Date, seconds: number): unknown {
  return {
    tool: "bigfleet-proxmox conformance",
    version: VERSION,
    outcome: r.outcome,
    target: p.target || null,
    provider_cmd: p.target ? null : (p.env.BFCONF_PROVIDER_CMD ?? "deno run main.ts"),
    lanes: [...p.lanes],
    run: p.run?.source ?? null,
    started_at: startedAt.toISOString(),
    duration_seconds: Number(seconds.toFixed(3)),
    summary: r.summary,
    behaviors: r.results.filter((x) => x.id !== null).map((x) => ({
      id: x.id,
      lane: x.lane,
      title: x.title,
      status: x.status,
      duration_seconds: x.seconds,
      message: x.message || null,
    })),
    checks: r.results.filter((x) => x.id === null).map((x) => ({
      name: x.title,
      status: x.status,
      duration_seconds: x.seconds,
      message: x.message || null,
    })),
  };
}

async function writeFile(path: string, text: string) {
  const dir = path.includes("/") ? path.slice(0, path.lastIndexOf("/")) : "";
  if (dir !== "") await Deno.mkdir(dir, { recursive: true });
  await Deno.writeTextFile(path, text);
}

async function main(argv: string[]): Promise<number> {
  let p: Plan;
  try {
    const parsed = parseArgv(RUNNER_FLAGS, argv, { help: true });
    if (parsed.help) {
      write(helpText(RUNNER, [], "deno task conformance"));
      return EXIT_OK;
    }
    p = plan(parsed.values);
    if (p.target !== "") {
      const why = await probe(p);
      if (why) return fail(`cannot list machines on ${p.target}: ${why}`, EXIT_FAILURE);
    }
  } catch (e) {
    if (e instanceof ConfigError) return fail(e.message, EXIT_USAGE);
    throw e;
  }
  const startedAt = new Date();
  const t0 = performance.now();
  const { raw } = await runLanes(p);
  const report = classify(parseDenoJunit(raw), expectedBehaviours(p.lanes, p.run));
  const seconds = (performance.now() - t0) / 1000;
  if (p.junit) await writeFile(p.junit, junitXml(report, "bigfleet-proxmox conformance"));
  if (p.json) {
    await writeFile(
      p.json,
      JSON.stringify(jsonReport(p, report, startedAt, seconds), null, 2) + "\n",
    );
  }
  const s = report.summary;
  console.log(
    `conformance ${report.outcome}: ${s.passed} passed, ${s.failed} failed, ${s.skipped} skipped, ${s.missing} missing ` +
      `(${[...p.lanes].join(", ")}${p.target ? ` on ${p.target}` : ""})`,
  );
  return report.outcome === "passed" ? EXIT_OK : EXIT_FAILURE;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
