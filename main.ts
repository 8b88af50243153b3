// The binary. Flags alone serve the CapacityProvider until SIGINT/SIGTERM;
// a first argument that is not a flag names a command (machines, version,
// help). Exit codes: 0 ok, 1 runtime failure, 2 usage or configuration
// error, 3 not found (docs/cli.md#exit-codes).

import { runCli } from "./src/cli/cli.ts";

if (import.meta.main) {
  Deno.exit(await runCli(Deno.args));
}
