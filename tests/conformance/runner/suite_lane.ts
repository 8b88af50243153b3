// Lane file for `deno task conformance`: the upstream baseline and the
// extension lane against ONE provider, either the running one the runner was
// pointed at (BFCONF_TARGET, optionally over TLS/mTLS) or one it boots with
// the certification flags (BFCONF_PROVIDER_CMD, seed BFCONF_SEED_COUNT).
// Not a *_test.ts file: `deno task test` leaves it to the runner.

import { clientChannel } from "../../../src/client/credentials.ts";
import {
  defaultSeed,
  fakeProviderArgs,
  type ProviderProcess,
  startProvider,
} from "../../harness/mod.ts";
import { defineConformanceSuite } from "../suite.ts";
import { ENV, suiteSelection } from "./lanes.ts";

const env = (name: string) => Deno.env.get(name) ?? "";

/** A provider someone else runs: nothing to start or stop. */
function attach(addr: string): ProviderProcess {
  return {
    addr,
    port: Number(addr.slice(addr.lastIndexOf(":") + 1)),
    pid: 0,
    logPath: "",
    readyMs: 0,
    kill() {},
    async stop() {},
    stderr: () => "",
    exited: new Promise(() => {}),
    exitStatus: () => undefined,
  };
}

const target = env(ENV.target);
const run = env(ENV.run);
const only = suiteSelection(
  new Set(env(ENV.lanes).split(",")),
  run === "" ? null : new RegExp(run),
);
const channel = target === "" ? null : await clientChannel({
  tls: env(ENV.tls) === "true",
  caFile: env(ENV.tlsCa),
  certFile: env(ENV.tlsCert),
  keyFile: env(ENV.tlsKey),
  serverName: env(ENV.tlsServerName),
});
const seed = Number(env(ENV.seedCount) || "256");

defineConformanceSuite(
  target === "" ? "spawned" : "target",
  () =>
    target === ""
      ? startProvider({ args: fakeProviderArgs({ seed }) })
      : Promise.resolve(attach(target)),
  {
    only,
    attached: target !== "",
    harness: {
      seed: defaultSeed(), // BFCONF_SEED, the runner's --seed
      ...(channel ? { credentials: channel.credentials, channelOptions: channel.options } : {}),
    },
  },
);
