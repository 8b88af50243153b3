// Serving, the binary's default command: parse and validate flags, start the
// app, serve until SIGINT/SIGTERM. Any startup problem is one line on stderr
// and exit code 2 (configuration) or 1 (runtime, e.g. the address is in use);
// nothing is served. A graceful stop that saw every running transition finish
// exits 0; one cut short by --shutdown-timeout or by a second signal (which
// stops at once) exits 1, and what was cut comes back FAILED at the next start.
// A signal while starting is kept until the provider serves; a second one
// then exits at once.

import { getLogger } from "@logtape/logtape";
import { FLAG_TABLE, parseArgv } from "../config/flags.ts";
import { loadConfig } from "../config/load.ts";
import { ConfigError } from "../config/types.ts";
import { type App, startApp } from "../app.ts";
import { catchUncaught } from "../server/uncaught.ts";
import { setupLogging } from "../server/log.ts";
import { createMetrics } from "../server/metrics.ts";
import {
  type Command,
  type Context,
  EXIT_FAILURE,
  EXIT_OK,
  EXIT_USAGE,
  fail,
  write,
} from "./command.ts";
import { versionText } from "./version_cmd.ts";

/**
 * A signal this soon after the first is the same one delivered twice, not an
 * operator's second: Ctrl-C reaches the whole process group, and a supervisor
 * in it (`deno task`, `timeout`) forwards it to the provider again.
 */
export const SAME_SIGNAL_MS = 250;

/** After a second signal, the longest the closing steps may take before the process exits anyway. */
const URGENT_STOP_MS = 5_000;
const log = getLogger(["bigfleet", "config"]);

export const serve: Command = {
  name: "serve",
  summary: "serve the CapacityProvider over gRPC (the default: flags alone serve)",
  usage: "[serve] [flags]\n       bigfleet-proxmox <command> [arguments] [flags]",
  description:
    "Serves the BigFleet CapacityProvider gRPC API for one Proxmox VE cluster. Without a command,\n" +
    "the flags below start the server.",
  flags: FLAG_TABLE,
  footer:
    "Flags use Go syntax: --name=value, --name value or -name value; a boolean is set bare\n" +
    "(--use-fake-backend) or with =false. Every flag in detail: docs/configuration.md; the\n" +
    'commands: docs/cli.md or "bigfleet-proxmox help <command>".',
  run: runServe,
};

async function runServe(args: string[], ctx: Context): Promise<number> {
  try {
    const meta = parseArgv(FLAG_TABLE, args, { help: true, version: true });
    if (meta.help) {
      ctx.printHelp();
      return EXIT_OK;
    }
    if (meta.version) {
      write(versionText());
      return EXIT_OK;
    }
  } catch (e) {
    if (e instanceof ConfigError) return fail(e.message, EXIT_USAGE);
    throw e;
  }
  let config;
  try {
    config = await loadConfig(args);
  } catch (e) {
    if (e instanceof ConfigError) return fail(e.message, EXIT_USAGE);
    throw e;
  }
  setupLogging(config.log);
  for (const warning of config.warnings) log.warn(warning);
  const metrics = createMetrics();
  catchUncaught(metrics);
  const stopped = Promise.withResolvers<number>();
  const now = new AbortController();
  let app: App | null = null;
  let signalledAt: number | null = null;
  const beginStop = (running: App) => {
    running.stop(now.signal).then(
      ({ unfinished }) =>
        stopped.resolve(unfinished.length === 0 && !now.signal.aborted ? EXIT_OK : EXIT_FAILURE),
      (e) => {
        console.error(`error: shutdown failed: ${firstLine(e)}`);
        stopped.resolve(EXIT_FAILURE);
      },
    );
  };
  const onSignal = () => {
    if (signalledAt !== null) {
      if (now.signal.aborted || performance.now() - signalledAt < SAME_SIGNAL_MS) return;
      now.abort();
      if (app === null) {
        // Still starting: nothing serves yet and every state write survives a kill.
        console.error("error: second signal during startup; stopping now");
        Deno.exit(EXIT_FAILURE);
      }
      console.error("error: second signal during shutdown; stopping now");
      // Nothing left to wait for but closing; never hang on it.
      setTimeout(() => stopped.resolve(EXIT_FAILURE), URGENT_STOP_MS);
      return;
    }
    signalledAt = performance.now();
    if (app === null) {
      log.info("signal during startup: stopping as soon as the provider has started");
    } else beginStop(app);
  };
  // Before startup, so a signal that comes while the port already accepts (or
  // sooner) is a graceful stop and not the runtime's default of dying at once.
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  try {
    app = await startApp(config, { metrics });
  } catch (e) {
    return fail(firstLine(e), EXIT_FAILURE);
  }
  if (signalledAt !== null) beginStop(app);
  return await stopped.promise;
}

/** One line that names the problem, whatever threw. */
function firstLine(e: unknown): string {
  const text = e instanceof Error ? e.message : String(e);
  return text.split("\n")[0];
}
