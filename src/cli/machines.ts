// `machines list|get|watch`: what a running provider holds, read over its
// gRPC API (Get and List only, so any CapacityProvider works). Exit codes:
// 0 ok, 1 the provider failed or could not be reached, 2 usage, 3 `get` of
// an unknown id (docs/cli.md#exit-codes).

import { flagError, forFlag, oneLine, quote } from "../config/errors.ts";
import { nearest, type Parsed } from "../config/flags.ts";
import { ConfigError } from "../config/types.ts";
import { checkTarget, ProviderReader, RpcFailure } from "./client.ts";
import {
  type Command,
  type Context,
  EXIT_FAILURE,
  EXIT_NOT_FOUND,
  EXIT_OK,
  EXIT_USAGE,
  fail,
  parseCommandArgs,
  positiveDuration,
  write,
} from "./command.ts";
import { clientChannel } from "./credentials.ts";
import {
  byId,
  document,
  type Format,
  FORMATS,
  type MachineView,
  revisionText,
  Table,
  view,
} from "./machine_view.ts";
import { machineStates, type WireMachine } from "./wire.ts";

const FILTERS = "Filters";
const OUTPUT = "Output";
const CONNECTION = "Provider connection";

const FILTER_FLAGS = {
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

const CONNECTION_FLAGS = {
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

const LIST_FLAGS = { ...FILTER_FLAGS, ...OUTPUT_FLAGS, ...CONNECTION_FLAGS };
const GET_FLAGS = { ...OUTPUT_FLAGS, ...CONNECTION_FLAGS };
const WATCH_FLAGS = {
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

type ConnectionValues = Parsed<typeof CONNECTION_FLAGS>["values"];
type FilterValues = Parsed<typeof FILTER_FLAGS>["values"];

interface Filter {
  states: number[];
  zones: Set<string> | null;
  types: Set<string> | null;
}

async function connect(v: ConnectionValues): Promise<ProviderReader> {
  forFlag("target", () => checkTarget(v.target));
  const timeoutMs = forFlag("timeout", () => positiveDuration(v.timeout));
  const channel = await clientChannel({
    tls: v.tls,
    caFile: v["tls-ca"],
    certFile: v["tls-cert"],
    keyFile: v["tls-key"],
    serverName: v["tls-server-name"],
  });
  return new ProviderReader(v.target, channel, timeoutMs);
}

function commaList(text: string): string[] {
  return text.split(",").map((s) => s.trim()).filter((s) => s !== "");
}

function parseFilter(v: FilterValues): Filter {
  const known = machineStates();
  const states = commaList(v.state).map((s) => {
    const name = s.toUpperCase().replace(/^MACHINE_STATE_/, "");
    const n = known.get(name);
    if (n !== undefined) return n;
    const names = [...known.keys()].map((k) => k.toLowerCase());
    const hint = nearest(s.toLowerCase(), names);
    throw flagError(
      "state",
      `unknown state ${quote(s)}${hint ? ` (did you mean ${quote(hint)}?)` : ""}; want ${
        names.join(", ")
      }`,
    );
  });
  const set = (text: string) => (text.trim() === "" ? null : new Set(commaList(text)));
  return { states, zones: set(v.zone), types: set(v.type) };
}

function matches(f: Filter, m: WireMachine): boolean {
  return (f.zones === null || f.zones.has(m.zone)) &&
    (f.types === null || f.types.has(m.instance_type));
}

function parseFormat(text: string): Format {
  const f = FORMATS.find((x) => x === text);
  if (!f) {
    const want = `${FORMATS.slice(0, -1).join(", ")} or ${FORMATS.at(-1)}`;
    throw flagError("output", `want ${want}, got ${quote(text)}`);
  }
  return f;
}

/** The exit code and one stderr line for a failed call. */
function rpcFailed(e: unknown, target: string): number {
  if (e instanceof RpcFailure) {
    return fail(`${e.method} on ${target} failed: ${oneLine(e.status)}`, EXIT_FAILURE);
  }
  throw e;
}

/** Runs `body` with usage errors mapped to exit 2 and failed calls to exit 1. */
async function guarded(target: () => string, body: () => Promise<number>): Promise<number> {
  try {
    return await body();
  } catch (e) {
    if (e instanceof ConfigError) return fail(e.message, EXIT_USAGE);
    return rpcFailed(e, target());
  }
}

/** Output for a set of machines in the chosen format. */
function render(
  format: Format,
  views: MachineView[],
  revision: Uint8Array,
  headers: boolean,
): string {
  switch (format) {
    case "table":
    case "wide":
      if (views.length === 0) return "";
      return new Table(format).lines(views, headers).join("\n") + "\n";
    case "name":
      return views.map((v) => `${v.id}\n`).join("");
    case "json":
    case "yaml":
      return document(format, { machines: views, revision: revisionText(revision) });
  }
}

const list: Command = {
  name: "list",
  summary: "list machines, filtered by state, zone and type",
  usage: "machines list [--state S] [--zone Z] [--type T] [-o table|wide|json|yaml|name] [flags]",
  flags: LIST_FLAGS,
  footer: "The state filter goes to the provider (ListFilter.states); zone and type are\n" +
    "filtered here. An empty result prints nothing in table form (and exits 0).",
  run(args, ctx) {
    const p = parseCommandArgs(LIST_FLAGS, args, ctx);
    if (typeof p === "number") return Promise.resolve(p);
    const v = p.values;
    return guarded(() => v.target, async () => {
      const format = parseFormat(v.output);
      const filter = parseFilter(v);
      const reader = await connect(v);
      try {
        const l = await reader.list(filter.states);
        const views = l.machines.filter((m) => matches(filter, m)).map(view).sort(byId);
        write(render(format, views, l.revision, !v["no-headers"]));
        return EXIT_OK;
      } finally {
        reader.close();
      }
    });
  },
};

const get: Command = {
  name: "get",
  summary: "show one machine by id",
  usage: "machines get ID [-o table|wide|json|yaml|name] [flags]",
  flags: GET_FLAGS,
  footer: `An id the provider does not know exits ${EXIT_NOT_FOUND}.`,
  run(args, ctx) {
    const p = parseCommandArgs(GET_FLAGS, args, ctx, { positionals: true });
    if (typeof p === "number") return Promise.resolve(p);
    const v = p.values;
    if (p.positionals.length !== 1) {
      return Promise.resolve(fail(
        `machines get takes one machine id, got ${p.positionals.length}`,
        EXIT_USAGE,
      ));
    }
    const id = p.positionals[0];
    return guarded(() => v.target, async () => {
      const format = parseFormat(v.output);
      const reader = await connect(v);
      try {
        let m: WireMachine;
        try {
          m = await reader.get(id);
        } catch (e) {
          if (e instanceof RpcFailure && e.code === 5) {
            return fail(`machine ${quote(id)} not found on ${v.target}`, EXIT_NOT_FOUND);
          }
          throw e;
        }
        const one = view(m);
        if (format === "json" || format === "yaml") write(document(format, one));
        else write(render(format, [one], new Uint8Array(), !v["no-headers"]));
        return EXIT_OK;
      } finally {
        reader.close();
      }
    });
  },
};

const watch: Command = {
  name: "watch",
  summary: "print the machines, then each machine again whenever it changes",
  usage: "machines watch [--state S] [--zone Z] [--type T] [--interval D] [-o FORMAT] [flags]",
  flags: WATCH_FLAGS,
  footer: "Follows List deltas with the revision cursor (since_revision); a provider without\n" +
    "deltas is listed in full each time and only changed machines are printed. json prints\n" +
    "one machine per line, yaml one document per machine. Stops on SIGINT/SIGTERM (exit 0).",
  run: runWatch,
};

async function runWatch(args: string[], ctx: Context): Promise<number> {
  const p = parseCommandArgs(WATCH_FLAGS, args, ctx);
  if (typeof p === "number") return p;
  const v = p.values;
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  try {
    return await guarded(() => v.target, async () => {
      const format = parseFormat(v.output);
      const filter = parseFilter(v);
      const intervalMs = forFlag("interval", () => positiveDuration(v.interval));
      const reader = await connect(v);
      // The channel is left open on exit: the process ends right after, and a
      // grpc-js goodbye after many calls can trip the provider's HTTP/2 stack
      // (docs/troubleshooting.md#process-aborts-with-an-nghttp2-assertion-exit-134).
      const table = format === "table" || format === "wide" ? new Table(format) : null;
      const seen = new Map<string, string>();
      let cursor: Uint8Array = new Uint8Array();
      let first = true;
      while (!stop.signal.aborted) {
        const l = await reader.list(filter.states, cursor);
        if (l.revision.length > 0) cursor = l.revision;
        const changed: MachineView[] = [];
        for (const m of l.machines) {
          if (!matches(filter, m)) continue;
          const one = view(m);
          const print = JSON.stringify(one);
          if (seen.get(one.id) === print) continue;
          seen.set(one.id, print);
          changed.push(one);
        }
        changed.sort(byId);
        if (table) {
          const lines = table.lines(changed, first && !v["no-headers"]);
          if (lines.length > 0) write(lines.join("\n") + "\n");
        } else {
          for (const one of changed) write(watchItem(format, one));
        }
        first = false;
        await pause(intervalMs, stop.signal);
      }
      return EXIT_OK;
    });
  } finally {
    Deno.removeSignalListener("SIGINT", onSignal);
    Deno.removeSignalListener("SIGTERM", onSignal);
  }
}

function watchItem(format: Format, one: MachineView): string {
  if (format === "name") return `${one.id}\n`;
  if (format === "json") return document("json", one, true);
  return `---\n${document("yaml", one)}`;
}

function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}

export const machines: Command = {
  name: "machines",
  summary: "list, get and watch the machines of a running provider (any CapacityProvider)",
  usage: "machines <list|get|watch> [arguments] [flags]",
  description: "Reads a running provider over its gRPC API (Get and List), as BigFleet sees it.",
  flags: CONNECTION_FLAGS,
  footer:
    'Run "bigfleet-proxmox help machines <command>" for a command\'s flags. Exit codes: 0 ok,\n' +
    "1 the provider failed or could not be reached, 2 usage error, 3 machine not found (get).",
  subcommands: [list, get, watch],
};
