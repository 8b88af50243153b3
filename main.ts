// The provider binary: parse and validate flags, start the app, serve until
// SIGINT/SIGTERM. Any startup problem is one line on stderr and exit code 2
// (configuration) or 1 (runtime, e.g. the address is in use); nothing is served.
// A graceful stop exits 0; a second signal during it exits 1 at once.

import { loadConfig } from "./src/config/load.ts";
import { ConfigError } from "./src/config/types.ts";
import { startApp } from "./src/app.ts";
import { installCrashGuards } from "./src/server/guards.ts";
import { setupLogging } from "./src/server/log.ts";
import { createMetrics } from "./src/server/metrics.ts";

async function main(): Promise<number> {
  setupLogging();
  let config;
  try {
    config = await loadConfig(Deno.args);
  } catch (e) {
    if (e instanceof ConfigError) {
      console.error(`error: ${e.message}`);
      return 2;
    }
    throw e;
  }
  const metrics = createMetrics();
  installCrashGuards(metrics);
  let app;
  try {
    app = await startApp(config, { metrics });
  } catch (e) {
    console.error(`error: ${startupMessage(e)}`);
    return 1;
  }
  const stopped = Promise.withResolvers<number>();
  let signalled = false;
  const onSignal = () => {
    if (signalled) {
      console.error("error: second signal during shutdown; exiting now");
      stopped.resolve(1);
      return;
    }
    signalled = true;
    app.stop().then(() => stopped.resolve(0), (e) => {
      console.error(`error: shutdown failed: ${startupMessage(e)}`);
      stopped.resolve(1);
    });
  };
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  return await stopped.promise;
}

/** One line that names the problem, whatever threw. */
function startupMessage(e: unknown): string {
  const text = e instanceof Error ? e.message : String(e);
  return text.split("\n")[0];
}

if (import.meta.main) {
  Deno.exit(await main());
}
