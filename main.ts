// The provider binary: parse and validate flags, start the app, serve until
// SIGINT/SIGTERM. Any startup problem is one line on stderr and exit code 2
// (configuration) or 1 (runtime, e.g. the address is in use); nothing is served.

import { loadConfig } from "./src/config/load.ts";
import { ConfigError } from "./src/config/types.ts";
import { startApp } from "./src/app.ts";
import { setupLogging } from "./src/server/log.ts";

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
  let app;
  try {
    app = await startApp(config);
  } catch (e) {
    console.error(`error: ${startupMessage(e)}`);
    return 1;
  }
  const stopped = Promise.withResolvers<void>();
  const onSignal = () => {
    app.stop().then(stopped.resolve, stopped.reject);
  };
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  await stopped.promise;
  return 0;
}

/** One line that names the problem, whatever threw. */
function startupMessage(e: unknown): string {
  const text = e instanceof Error ? e.message : String(e);
  const line = text.split("\n")[0];
  return /EADDRINUSE|address already in use/i.test(text)
    ? `cannot listen: address already in use (${line})`
    : line;
}

if (import.meta.main) {
  Deno.exit(await main());
}
