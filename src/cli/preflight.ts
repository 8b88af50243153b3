// `preflight`: check a real cluster with exactly the serving flags (the same
// flag table and loader as serve.ts) before BigFleet depends on it, and as
// the Helm chart's `helm test`. Every check is one PASS/WARN/FAIL/SKIP line
// with its fix; exit 0 only when nothing FAILs. It only reads: nothing is
// created, changed or deleted, and no listener or state file is opened.
// The checks are the Proxmox backend's (src/proxmox/preflight/); this command
// runs them and reports what they found. Both load when it runs: serving never
// needs them (docs/performance.md#what-loads-before-the-port-opens).

import { FLAG_TABLE, type FlagTable } from "../config/flags.ts";
import { flagError, forFlag, quote } from "../config/errors.ts";
import { loadConfig } from "../config/load.ts";
import { ConfigError } from "../config/types.ts";
import {
  type Command,
  type Context,
  EXIT_FAILURE,
  EXIT_OK,
  EXIT_USAGE,
  fail,
  parseCommandArgs,
  positiveDuration,
  servingArgv,
  write,
} from "./command.ts";
import type { Format } from "./preflight_report.ts";

const PREFLIGHT = "Preflight";

const OWN_FLAGS = {
  output: {
    kind: "string",
    default: "text",
    topic: PREFLIGHT,
    short: "o",
    arg: "FORMAT",
    help: "text (one line per check), json or yaml",
  },
  timeout: {
    kind: "string",
    default: "2m",
    topic: PREFLIGHT,
    arg: "DURATION",
    help: "bound of the whole run (a check cut short FAILs)",
  },
} as const;

const FLAGS = { ...OWN_FLAGS, ...FLAG_TABLE } as const satisfies FlagTable;

export const preflight: Command = {
  name: "preflight",
  summary: "check a Proxmox cluster before going live (trust, token, privileges, templates...)",
  usage: "preflight [serving flags] [-o text|json|yaml] [--timeout DURATION]",
  description:
    "Checks the cluster the serving flags name: the API is reachable and its certificate\n" +
    "trusted, the token valid, every privilege the provider uses granted on every path it uses,\n" +
    "each --nodes entry online, the pool there, each offering's template a template with the\n" +
    "guest agent that can be cloned to its zone, and room on the storages for every slot. It\n" +
    "only reads: nothing is created, changed or deleted.",
  flags: FLAGS,
  footer: "Takes the serving flags unchanged (--addr, --state and the like are accepted and\n" +
    "ignored). Exit 0 when nothing FAILs (WARN and SKIP are fine), 1 when a check FAILs,\n" +
    "2 on a usage or configuration error. Every check and fix: docs/cli.md#preflight.",
  run: runPreflightCommand,
};

function parseFormat(text: string, formats: readonly Format[]): Format {
  const f = formats.find((x) => x === text);
  if (!f) throw flagError("output", `want text, json or yaml, got ${quote(text)}`);
  return f;
}

async function runPreflightCommand(args: string[], ctx: Context): Promise<number> {
  const p = parseCommandArgs(FLAGS, args, ctx);
  if (typeof p === "number") return p;
  const [{ runPreflight, skipped }, { FORMATS, ok, render }] = await Promise.all([
    import("../proxmox/mod.ts"),
    import("./preflight_report.ts"),
  ]);
  const v = p.values as Record<string, string | boolean>;
  let config;
  let format: Format;
  let deadlineMs: number;
  try {
    format = parseFormat(String(v.output), FORMATS);
    deadlineMs = forFlag("timeout", () => positiveDuration(String(v.timeout)));
    config = await loadConfig(servingArgv(FLAG_TABLE as FlagTable, v));
  } catch (e) {
    if (e instanceof ConfigError) return fail(e.message, EXIT_USAGE);
    throw e;
  }
  if (config.backend === "fake") {
    write(render(format, {
      backend: "fake",
      apiUrl: null,
      pveVersion: null,
      results: [skipped(
        "backend",
        "fake",
        "the fake backend creates no VMs: there is no Proxmox cluster to check",
        "run preflight with the flags of a real deployment (--proxmox-api-url and the rest)",
      )],
    }));
    return EXIT_OK;
  }
  const report = await runPreflight(config, { deadlineMs });
  write(render(format, {
    backend: "proxmox",
    apiUrl: config.proxmox!.apiUrl,
    pveVersion: report.pveVersion,
    results: report.results,
  }));
  return ok(report.results) ? EXIT_OK : EXIT_FAILURE;
}
