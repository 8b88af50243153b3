// The work of `machines list|get|watch` (their flags and help: machines.ts):
// a client of any CapacityProvider, Get and List only.

import { flagError, forFlag, oneLine, quote } from "../config/errors.ts";
import { nearest, type Parsed } from "../config/flags.ts";
import { ConfigError } from "../config/types.ts";
import { checkTarget, ProviderReader, RpcFailure } from "../client/client.ts";
import {
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
import { clientChannel } from "../client/credentials.ts";
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
import { CONNECTION_FLAGS, FILTER_FLAGS, GET_FLAGS, LIST_FLAGS, WATCH_FLAGS } from "./machines.ts";
import { machineStates, type WireMachine } from "../client/wire.ts";

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

/** ` matching state failed, zone pve1` for the filters given; "" without any. */
function filterText(v: FilterValues): string {
  const given = (["state", "zone", "type"] as const).filter((k) => v[k].trim() !== "");
  return given.length === 0 ? "" : ` matching ${given.map((k) => `${k} ${v[k]}`).join(", ")}`;
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

export function runList(args: string[], ctx: Context): Promise<number> {
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
      // As kubectl does: say so on stderr, so stdout stays what a script reads.
      if (views.length === 0 && format !== "json" && format !== "yaml") {
        console.error(`No machines found on ${v.target}${filterText(v)}.`);
      }
      return EXIT_OK;
    } finally {
      reader.close();
    }
  });
}

export function runGet(args: string[], ctx: Context): Promise<number> {
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
}

export async function runWatch(args: string[], ctx: Context): Promise<number> {
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
