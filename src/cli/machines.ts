// `machines list|get|watch`: what a running provider holds, read over its
// gRPC API (Get and List only, so any CapacityProvider works). Exit codes:
// 0 ok, 1 the provider failed or could not be reached, 2 usage, 3 `get` of
// an unknown id (docs/cli.md#exit-codes).
//
// Only what help and dispatch need is here; the commands' work is in
// machines_run.ts, loaded when one runs, so serving never loads the client
// side (proto-loader, yaml: docs/performance.md#what-loads-before-the-port-opens).

import { type Command, type Context, EXIT_NOT_FOUND } from "./command.ts";
import { recover } from "./recover.ts";
import { room } from "./room.ts";

const FILTERS = "Filters";
const OUTPUT = "Output";
const CONNECTION = "Provider connection";

export const FILTER_FLAGS = {
  state: {
    kind: "string",
    default: "",
    topic: FILTERS,
    arg: "STATES",
    none: "every state",
    help: "only machines in these states, comma-separated (e.g. idle,failed)",
  },
  zone: {
    kind: "string",
    default: "",
    topic: FILTERS,
    arg: "ZONES",
    none: "every zone",
    help: "only machines in these zones, comma-separated",
  },
  type: {
    kind: "string",
    default: "",
    topic: FILTERS,
    arg: "TYPES",
    none: "every type",
    help: "only machines of these instance types, comma-separated",
  },
} as const;

const OUTPUT_FLAGS = {
  output: {
    kind: "string",
    default: "table",
    topic: OUTPUT,
    short: "o",
    arg: "FORMAT",
    help: "table, wide, json, yaml or name (ids only)",
  },
  "no-headers": {
    kind: "bool",
    default: false,
    topic: OUTPUT,
    help: "table and wide: leave out the header line",
  },
} as const;

export const CONNECTION_FLAGS = {
  target: {
    kind: "string",
    default: "127.0.0.1:9000",
    topic: CONNECTION,
    arg: "HOST:PORT",
    help: "the provider's gRPC address",
  },
  tls: {
    kind: "bool",
    default: false,
    topic: CONNECTION,
    help: "use TLS, verifying the provider with the system trust store",
  },
  "tls-ca": {
    kind: "string",
    default: "",
    topic: CONNECTION,
    arg: "PATH",
    help: "PEM CA bundle that verifies the provider's certificate (implies --tls)",
  },
  "tls-cert": {
    kind: "string",
    default: "",
    topic: CONNECTION,
    arg: "PATH",
    help: "PEM client certificate for mTLS, with --tls-key (implies --tls)",
  },
  "tls-key": {
    kind: "string",
    default: "",
    topic: CONNECTION,
    arg: "PATH",
    help: "PEM private key for --tls-cert",
  },
  "tls-server-name": {
    kind: "string",
    default: "",
    topic: CONNECTION,
    arg: "NAME",
    none: "the target's host",
    help: "name the provider's certificate must carry",
  },
  timeout: {
    kind: "string",
    default: "10s",
    topic: CONNECTION,
    arg: "DURATION",
    help: "deadline of each call",
  },
} as const;

export const LIST_FLAGS = { ...FILTER_FLAGS, ...OUTPUT_FLAGS, ...CONNECTION_FLAGS };
export const GET_FLAGS = { ...OUTPUT_FLAGS, ...CONNECTION_FLAGS };
export const WATCH_FLAGS = {
  ...FILTER_FLAGS,
  ...OUTPUT_FLAGS,
  interval: {
    kind: "string",
    default: "2s",
    topic: OUTPUT,
    arg: "DURATION",
    help: "pause between List calls",
  },
  ...CONNECTION_FLAGS,
} as const;

type Runner = "runList" | "runGet" | "runWatch";

function lazy(name: Runner): (args: string[], ctx: Context) => Promise<number> {
  return async (args, ctx) => (await import("./machines_run.ts"))[name](args, ctx);
}

const list: Command = {
  name: "list",
  summary: "list machines, filtered by state, zone and type",
  usage: "machines list [--state S] [--zone Z] [--type T] [-o table|wide|json|yaml|name] [flags]",
  flags: LIST_FLAGS,
  footer: "The state filter goes to the provider (ListFilter.states); zone and type are\n" +
    'filtered here. An empty result prints "No machines found …" on stderr and exits 0.',
  run: lazy("runList"),
};

const get: Command = {
  name: "get",
  summary: "show one machine by id",
  usage: "machines get ID [-o table|wide|json|yaml|name] [flags]",
  flags: GET_FLAGS,
  footer: `An id the provider does not know exits ${EXIT_NOT_FOUND}.`,
  run: lazy("runGet"),
};

const watch: Command = {
  name: "watch",
  summary: "print the machines, then each machine again whenever it changes",
  usage: "machines watch [--state S] [--zone Z] [--type T] [--interval D] [-o FORMAT] [flags]",
  flags: WATCH_FLAGS,
  footer: "Follows List deltas with the revision cursor (since_revision); a provider without\n" +
    "deltas is listed in full each time and only changed machines are printed. json prints\n" +
    "one machine per line, yaml one document per machine. Stops on SIGINT/SIGTERM (exit 0).",
  run: lazy("runWatch"),
};

export const machines: Command = {
  name: "machines",
  summary:
    "list, get and watch the machines of a running provider; recover a FAILED one; show its room",
  usage: "machines <list|get|watch|recover|room> [arguments] [flags]",
  description:
    "list, get and watch read a running provider over its gRPC API (Get and List), as BigFleet\n" +
    "sees it, so they work against any CapacityProvider; recover and room use this provider's\n" +
    "admin socket.",
  flags: CONNECTION_FLAGS,
  footer:
    'Run "bigfleet-proxmox help machines <command>" for a command\'s flags. Exit codes: 0 ok,\n' +
    "1 the provider failed or could not be reached, 2 usage error, 3 machine not found (get).",
  subcommands: [list, get, watch, recover, room],
};
