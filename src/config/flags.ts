// The command-line surface: flag tables (kind, default, topic and one-line
// help, from which --help is generated; docs/configuration.md lists the same)
// and Go-style argv handling (`-name`, `--name`, `=value` or separate value,
// bare booleans), shared by the server and every subcommand.

import { ConfigError } from "./types.ts";
import { oneLine, quote } from "./errors.ts";
import { ROOM_FLAGS } from "./room_flags.ts";

export type FlagKind = "string" | "bool";

export interface FlagSpec {
  readonly kind: FlagKind;
  readonly default: string | boolean;
  /** Heading the flag is listed under in help (and in the docs). */
  readonly topic: string;
  /** One line for help. */
  readonly help: string;
  /** Placeholder for the value in help, e.g. HOST:PORT. */
  readonly arg?: string;
  /** What an empty default means, for help and docs ("empty" when unset). */
  readonly none?: string;
  /** One-letter alias: `-o json` for `--output json`. */
  readonly short?: string;
}

export type FlagTable = Readonly<Record<string, FlagSpec>>;

/** Raw values of a table: strings still unparsed, booleans decided. */
export type ValuesOf<T extends FlagTable> = {
  -readonly [K in keyof T]: T[K]["kind"] extends "bool" ? boolean : string;
};

const CORE = "Core";
const PROXMOX = "Proxmox connection";
const CATALOG = "Catalog, offerings and pricing";
const BOOTSTRAP = "Bootstrap and background work";
const SERVING = "Serving, observability and gRPC TLS";

/** Every serving flag (docs/configuration.md#flag-reference), in help order. */
export const FLAG_TABLE = {
  "addr": {
    kind: "string",
    default: ":9000",
    topic: CORE,
    arg: "HOST:PORT",
    help: "gRPC listen address (CapacityProvider, health, reflection)",
  },
  "provider": {
    kind: "string",
    default: "proxmox",
    topic: CORE,
    arg: "NAME",
    help: "provider label: first segment of every machine id, one per cluster",
  },
  "proxmox-backend": {
    kind: "string",
    default: "auto",
    topic: CORE,
    arg: "MODE",
    help: "proxmox, fake or auto (real when --proxmox-api-url is set)",
  },
  "use-fake-backend": {
    kind: "bool",
    default: false,
    topic: CORE,
    help: "in-memory fake backend: no VM is ever created (tests and demos)",
  },
  "fake-delay": {
    kind: "string",
    default: "0s",
    topic: CORE,
    arg: "DURATION",
    help: "how long each fake-backend transition takes",
  },
  "state": {
    kind: "string",
    default: "",
    topic: CORE,
    arg: "PATH",
    help: "Deno KV file for durable state (empty: in memory, lost on restart)",
  },
  "admin-socket": {
    kind: "string",
    default: "",
    topic: CORE,
    arg: "PATH",
    none: "<--state>.admin; off without --state",
    help: "unix socket (mode 0600) for machines recover and state backup; off disables it",
  },
  "proxmox-api-url": {
    kind: "string",
    default: "",
    topic: PROXMOX,
    arg: "URL",
    help: "API base URL, e.g. https://pve1:8006/api2/json",
  },
  "proxmox-token-id": {
    kind: "string",
    default: "",
    topic: PROXMOX,
    arg: "ID",
    help: "API token id USER@REALM!TOKENID",
  },
  "proxmox-token-file": {
    kind: "string",
    default: "",
    topic: PROXMOX,
    arg: "PATH",
    help: "file holding the token secret (preferred over the inline secret)",
  },
  "proxmox-token-secret": {
    kind: "string",
    default: "",
    topic: PROXMOX,
    arg: "SECRET",
    help: "the token secret inline (visible in ps; use the file)",
  },
  "proxmox-ca-file": {
    kind: "string",
    default: "",
    topic: PROXMOX,
    arg: "PATH",
    help: "PEM bundle that verifies the API certificate",
  },
  "proxmox-tls-fingerprint": {
    kind: "string",
    default: "",
    topic: PROXMOX,
    arg: "SHA256",
    help: "pinned SHA-256 fingerprint of the API certificate",
  },
  "proxmox-pool": {
    kind: "string",
    default: "",
    topic: PROXMOX,
    arg: "POOL",
    help: "resource pool every clone is created in",
  },
  "proxmox-tags": {
    kind: "string",
    default: "bigfleet",
    topic: PROXMOX,
    arg: "LIST",
    help: "tags every VM gets (comma list; @machine = a per-machine tag; empty = none)",
  },
  "nodes": {
    kind: "string",
    default: "",
    topic: PROXMOX,
    arg: "LIST",
    help: "comma list of Proxmox node names; each node is one zone",
  },
  "proxmox-calls-per-node": {
    kind: "string",
    default: "2",
    topic: PROXMOX,
    arg: "N",
    help: "protected API calls in flight per node (pvedaemon has 3 workers; 0: no limit)",
  },
  "proxmox-clones-per-storage": {
    kind: "string",
    default: "2",
    topic: PROXMOX,
    arg: "N",
    help: "clone tasks at once per node and storage (a shared storage: per cluster; 0: no limit)",
  },
  ...ROOM_FLAGS,
  "proxmox-vmid-range": {
    kind: "string",
    default: "",
    topic: PROXMOX,
    arg: "FIRST-LAST",
    none: "the datacenter's next-id range",
    help: "VMIDs clones may take, e.g. 20000-29999 (within the datacenter's next-id range)",
  },
  "instance-types": {
    kind: "string",
    default: "",
    topic: CATALOG,
    arg: "PATH",
    none: "built-in",
    help: "JSON instance-type catalog",
  },
  "template-vmid": {
    kind: "string",
    default: "9000",
    topic: CATALOG,
    arg: "VMID|NODE=VMID,...",
    help: "template for types that name none: one VMID, or one per node",
  },
  "template-name": {
    kind: "string",
    default: "",
    topic: CATALOG,
    arg: "NAME",
    help: "find the template on each node by this name (instead of --template-vmid)",
  },
  "offerings": {
    kind: "string",
    default: "",
    topic: CATALOG,
    arg: "PATH",
    none: "built-in",
    help: "JSON offerings file: the slots this provider may fill",
  },
  "seed-count": {
    kind: "string",
    default: "32",
    topic: CATALOG,
    arg: "N",
    help: "slots in the built-in offerings (ignored with --offerings)",
  },
  "default-zone": {
    kind: "string",
    default: "pve",
    topic: CATALOG,
    arg: "NAME",
    help: "fake backend only: its zones are NAME-a and NAME-b",
  },
  "prices": {
    kind: "string",
    default: "",
    topic: CATALOG,
    arg: "LIST",
    help: "USD/hour per type, e.g. pve.small=0.01,pve.large=0.04",
  },
  "price-per-vcpu-hour": {
    kind: "string",
    default: "0.0030",
    topic: CATALOG,
    arg: "USD",
    help: "synthetic price per vCPU-hour for types without a price",
  },
  "price-per-gib-hour": {
    kind: "string",
    default: "0.0008",
    topic: CATALOG,
    arg: "USD",
    help: "synthetic price per GiB-hour of memory for types without a price",
  },
  "bootstrap-path": {
    kind: "string",
    default: "/run/bigfleet-bootstrap",
    topic: BOOTSTRAP,
    arg: "PATH",
    help: "where Configure writes the bootstrap blob in the guest",
  },
  "bootstrap-exec": {
    kind: "string",
    default: "/bin/sh",
    topic: BOOTSTRAP,
    arg: "ARGV",
    help: "comma-separated command that runs the blob (path appended)",
  },
  "ready-gate": {
    kind: "bool",
    default: true,
    topic: BOOTSTRAP,
    help: "hold CONFIGURING until the node is Ready (false: templates without kubelet)",
  },
  "ready-exec": {
    kind: "string",
    default: "",
    topic: BOOTSTRAP,
    arg: "ARGV",
    none: "built-in",
    help:
      "readiness check run in the guest until it exits 0 (comma-separated argv; built-in: kubelet healthz, then node Ready)",
  },
  "ready-timeout": {
    kind: "string",
    default: "0s",
    topic: BOOTSTRAP,
    arg: "DURATION",
    help: "longest wait for Ready after the hook (0s: until Configure's timeout nears)",
  },
  "reconcile-interval": {
    kind: "string",
    default: "2m",
    topic: BOOTSTRAP,
    arg: "DURATION",
    help: "period of the Proxmox to inventory refresh (0: off)",
  },
  "shutdown-timeout": {
    kind: "string",
    default: "16m",
    topic: BOOTSTRAP,
    arg: "DURATION",
    help: "on SIGTERM, how long running transitions may take to finish (0: stop at once)",
  },
  "metrics-addr": {
    kind: "string",
    default: ":9090",
    topic: SERVING,
    arg: "HOST:PORT",
    help: "/metrics, /healthz and /readyz listener (empty: off)",
  },
  "reflection": {
    kind: "bool",
    default: true,
    topic: SERVING,
    help: "register gRPC server reflection",
  },
  "tls-cert": {
    kind: "string",
    default: "",
    topic: SERVING,
    arg: "PATH",
    help: "PEM server certificate for the gRPC listener (with --tls-key: TLS)",
  },
  "tls-key": {
    kind: "string",
    default: "",
    topic: SERVING,
    arg: "PATH",
    help: "PEM private key for --tls-cert",
  },
  "tls-ca": {
    kind: "string",
    default: "",
    topic: SERVING,
    arg: "PATH",
    help: "PEM client CA bundle: turns TLS into mTLS",
  },
  "log-level": {
    kind: "string",
    default: "",
    topic: SERVING,
    arg: "LEVEL",
    none: "$BIGFLEET_LOG_LEVEL, else info",
    help: "lowest level logged: trace, debug, info, warn, error or fatal",
  },
  "log-format": {
    kind: "string",
    default: "",
    topic: SERVING,
    arg: "FORMAT",
    none: "$BIGFLEET_LOG_FORMAT, else json",
    help: "json (one object per line) or text (for reading in a terminal)",
  },
} as const satisfies FlagTable;

/** Raw serving flag values. */
export type FlagValues = ValuesOf<typeof FLAG_TABLE>;

export interface ParseOptions {
  /** Accept arguments that are not flags (and everything after `--`). */
  positionals?: boolean;
  /** Recognise -h/--help (and --version with `version`) instead of calling them unknown. */
  help?: boolean;
  version?: boolean;
}

export interface Parsed<T extends FlagTable> {
  values: ValuesOf<T>;
  positionals: string[];
  /** -h, -help, --help (or --h) was given: nothing else was validated after it. */
  help: boolean;
  /** --version was given (only with `version: true`). */
  version: boolean;
}

// strconv.ParseBool spellings, as Go's flag package accepts them.
const TRUE_WORDS = new Set(["1", "t", "T", "TRUE", "true", "True"]);
const FALSE_WORDS = new Set(["0", "f", "F", "FALSE", "false", "False"]);
const HELP_NAMES = new Set(["h", "help"]);

/**
 * Parse argv against a flag table, with defaults applied. Errors are one-line
 * ConfigErrors naming the flag as it was typed. Flag values are never echoed
 * in errors: a mistyped flag may carry a secret.
 */
export function parseArgv<T extends FlagTable>(
  table: T,
  argv: readonly string[],
  opts: ParseOptions = {},
): Parsed<T> {
  const values: Record<string, string | boolean> = {};
  for (const [name, spec] of Object.entries(table)) values[name] = spec.default;
  const positionals: string[] = [];
  const done = (help: boolean, version: boolean): Parsed<T> => ({
    values: values as ValuesOf<T>,
    positionals,
    help,
    version,
  });
  const shorts = new Map(
    Object.entries(table).flatMap(([name, s]) => (s.short ? [[s.short, name]] : [])),
  );
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--") {
      if (opts.positionals) {
        positionals.push(...argv.slice(i + 1));
        break;
      }
      if (i + 1 < argv.length) {
        throw new ConfigError(`unexpected argument ${quote(argv[i + 1])}: no positional arguments`);
      }
      continue;
    }
    if (!arg.startsWith("-") || arg === "-") {
      if (opts.positionals) {
        positionals.push(arg);
        continue;
      }
      throw new ConfigError(`unexpected argument ${quote(arg)}: flags look like --name=value`);
    }
    const dashes = arg.startsWith("--") ? "--" : "-";
    const body = arg.slice(dashes.length);
    const eq = body.indexOf("=");
    const typed = eq < 0 ? body : body.slice(0, eq);
    if (typed === "" || typed.startsWith("-")) {
      throw new ConfigError(`bad flag syntax: ${quote(arg)}`);
    }
    const name = Object.hasOwn(table, typed) ? typed : shorts.get(typed);
    if (name === undefined) {
      if (opts.help && HELP_NAMES.has(typed)) return done(true, false);
      if (opts.version && typed === "version") return done(false, true);
      const known = [...Object.keys(table)];
      if (opts.help) known.push("help");
      if (opts.version) known.push("version");
      const hint = nearest(typed, known);
      throw new ConfigError(
        `unknown flag ${dashes}${oneLine(typed)}${hint ? ` (did you mean ${dashes}${hint}?)` : ""}`,
      );
    }
    const shown = `${dashes}${typed}`;
    if (table[name].kind === "bool") {
      values[name] = eq < 0 ? true : boolWord(shown, body.slice(eq + 1));
    } else if (eq >= 0) {
      values[name] = body.slice(eq + 1);
    } else if (i + 1 < argv.length) {
      // Like Go: the next argument is the value even when it starts with "-".
      values[name] = argv[++i];
    } else {
      throw new ConfigError(`flag needs an argument: ${shown}`);
    }
  }
  return done(false, false);
}

/** Parse serving argv into raw values with defaults applied. */
export function parseFlags(argv: readonly string[]): FlagValues {
  return parseArgv(FLAG_TABLE, argv).values;
}

function boolWord(shown: string, word: string): boolean {
  if (TRUE_WORDS.has(word)) return true;
  if (FALSE_WORDS.has(word)) return false;
  throw new ConfigError(`${shown}: invalid boolean ${quote(word)} (use true or false)`);
}

/**
 * The candidate a typo most likely meant: the only one it is a prefix of, or
 * the closest within a small edit distance (1 for short words, 2 otherwise).
 */
export function nearest(word: string, candidates: readonly string[]): string | undefined {
  if (word.length >= 3) {
    const prefixed = candidates.filter((c) => c.startsWith(word));
    if (prefixed.length === 1) return prefixed[0];
  }
  const limit = word.length <= 4 ? 1 : 2;
  let best: string | undefined;
  let bestDistance = limit + 1;
  for (const c of candidates) {
    const d = editDistance(word, c);
    if (d < bestDistance) {
      best = c;
      bestDistance = d;
    }
  }
  return best;
}

/** Optimal string alignment distance: insertions, deletions, substitutions, swaps. */
function editDistance(a: string, b: string): number {
  const rows = a.length + 1;
  const cols = b.length + 1;
  const d: number[][] = Array.from({ length: rows }, (_, i) => {
    const row = new Array<number>(cols).fill(0);
    row[0] = i;
    return row;
  });
  for (let j = 0; j < cols; j++) d[0][j] = j;
  for (let i = 1; i < rows; i++) {
    for (let j = 1; j < cols; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      d[i][j] = Math.min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        d[i][j] = Math.min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.length][b.length];
}
