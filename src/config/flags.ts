// The command-line surface: the flag table with its defaults, and Go-style
// argv handling (`-name`, `--name`, `=value` or separate value, bare booleans)
// on top of node:util parseArgs, which only knows `--name`.

import { parseArgs } from "node:util";
import { ConfigError } from "./types.ts";
import { oneLine, quote } from "./errors.ts";

export type FlagKind = "string" | "bool";

/** Every flag (product.md §3) with its kind and default. */
export const FLAG_TABLE = {
  "addr": { kind: "string", default: ":9000" },
  "provider": { kind: "string", default: "proxmox" },
  "proxmox-backend": { kind: "string", default: "auto" },
  "use-fake-backend": { kind: "bool", default: false },
  "fake-delay": { kind: "string", default: "0s" },
  "proxmox-api-url": { kind: "string", default: "" },
  "proxmox-token-id": { kind: "string", default: "" },
  "proxmox-token-secret": { kind: "string", default: "" },
  "proxmox-token-file": { kind: "string", default: "" },
  "proxmox-ca-file": { kind: "string", default: "" },
  "proxmox-tls-fingerprint": { kind: "string", default: "" },
  "proxmox-pool": { kind: "string", default: "" },
  "nodes": { kind: "string", default: "" },
  "offerings": { kind: "string", default: "" },
  "seed-count": { kind: "string", default: "32" },
  "default-zone": { kind: "string", default: "pve" },
  "instance-types": { kind: "string", default: "" },
  "template-vmid": { kind: "string", default: "9000" },
  "template-name": { kind: "string", default: "" },
  "prices": { kind: "string", default: "" },
  "price-per-vcpu-hour": { kind: "string", default: "0.0030" },
  "price-per-gib-hour": { kind: "string", default: "0.0008" },
  "bootstrap-path": { kind: "string", default: "/run/bigfleet-bootstrap" },
  "bootstrap-exec": { kind: "string", default: "/bin/sh" },
  "reconcile-interval": { kind: "string", default: "2m" },
  "state": { kind: "string", default: "" },
  "metrics-addr": { kind: "string", default: ":9090" },
  "reflection": { kind: "bool", default: true },
  "tls-cert": { kind: "string", default: "" },
  "tls-key": { kind: "string", default: "" },
  "tls-ca": { kind: "string", default: "" },
} as const satisfies Record<string, { kind: FlagKind; default: string | boolean }>;

export type FlagName = keyof typeof FLAG_TABLE;

/** Raw flag values: strings still unparsed, booleans decided. */
export type FlagValues = {
  [K in FlagName]: (typeof FLAG_TABLE)[K]["kind"] extends "bool" ? boolean : string;
};

const SPECS: ReadonlyMap<string, FlagKind> = new Map(
  Object.entries(FLAG_TABLE).map(([name, spec]) => [name, spec.kind]),
);

// strconv.ParseBool spellings, as Go's flag package accepts them.
const TRUE_WORDS = new Set(["1", "t", "T", "TRUE", "true", "True"]);
const FALSE_WORDS = new Set(["0", "f", "F", "FALSE", "false", "False"]);

/**
 * Rewrite Go-style argv into `--name=value` tokens parseArgs understands.
 * Flag values are never echoed in errors: a mistyped flag may carry a secret.
 */
export function normaliseArgv(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--" && i + 1 < argv.length) {
      throw new ConfigError(`unexpected argument ${quote(argv[i + 1])}: no positional arguments`);
    }
    if (arg === "--") continue;
    if (!arg.startsWith("-") || arg === "-") {
      throw new ConfigError(`unexpected argument ${quote(arg)}: flags look like --name=value`);
    }
    const body = arg.startsWith("--") ? arg.slice(2) : arg.slice(1);
    const eq = body.indexOf("=");
    const name = eq < 0 ? body : body.slice(0, eq);
    if (name === "" || name.startsWith("-")) {
      throw new ConfigError(`bad flag syntax: ${quote(arg)}`);
    }
    const kind = SPECS.get(name);
    if (kind === undefined) throw new ConfigError(`unknown flag --${oneLine(name)}`);
    if (kind === "bool") {
      out.push(`--${name}=${eq < 0 ? "true" : boolWord(name, body.slice(eq + 1))}`);
    } else if (eq >= 0) {
      out.push(`--${name}=${body.slice(eq + 1)}`);
    } else if (i + 1 < argv.length) {
      // Like Go: the next argument is the value even when it starts with "-".
      out.push(`--${name}=${argv[++i]}`);
    } else {
      throw new ConfigError(`flag needs an argument: --${name}`);
    }
  }
  return out;
}

/** Parse argv into raw values with defaults applied. */
export function parseFlags(argv: readonly string[]): FlagValues {
  const options = Object.fromEntries(
    [...SPECS.keys()].map((name) => [name, { type: "string" as const }]),
  );
  let parsed: Record<string, string | boolean | undefined>;
  try {
    parsed = parseArgs({
      args: normaliseArgv(argv),
      options,
      strict: true,
      allowPositionals: false,
    }).values as Record<string, string | boolean | undefined>;
  } catch (err) {
    // normaliseArgv already rejects everything parseArgs would; keep one line regardless.
    throw new ConfigError(oneLine(err instanceof Error ? err.message : String(err)));
  }
  const values: Record<string, string | boolean> = {};
  for (const [name, spec] of Object.entries(FLAG_TABLE)) {
    const given = Object.hasOwn(parsed, name) ? parsed[name] : undefined;
    if (typeof given !== "string") values[name] = spec.default;
    else values[name] = spec.kind === "bool" ? given === "true" : given;
  }
  return values as FlagValues;
}

function boolWord(name: string, word: string): "true" | "false" {
  if (TRUE_WORDS.has(word)) return "true";
  if (FALSE_WORDS.has(word)) return "false";
  throw new ConfigError(`--${name}: invalid boolean ${quote(word)} (use true or false)`);
}
