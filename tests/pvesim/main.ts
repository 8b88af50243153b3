// The simulator on its own, for trying the real backend without a cluster
// (docs/try-it.md): `deno task pvesim [flags]`. It prints the URL, token,
// CA file and the provider flags that reach it, serves until SIGINT or
// SIGTERM, then stops and removes its PKI folder (unless --cert-dir named
// one). --help prints the flags; an unknown flag is one `error:` line, exit 2.

import { parseArgv } from "../../src/config/flags.ts";
import { ConfigError } from "../../src/config/types.ts";
import { helpText } from "../../src/cli/help.ts";
import type { Command } from "../../src/cli/command.ts";
import { REAL_TIMING, scaledTiming, startSimulator } from "./mod.ts";
import type { SimOptions } from "./types.ts";
import type { CutMode } from "./types_cluster.ts";

const SIM = "Simulator";
const FAULTS = "Fidelity and faults";

const FLAGS = {
  port: {
    kind: "string",
    default: "8006",
    topic: SIM,
    arg: "PORT",
    help: "HTTPS port (0: any free port)",
  },
  host: { kind: "string", default: "127.0.0.1", topic: SIM, arg: "HOST", help: "listen address" },
  nodes: {
    kind: "string",
    default: "pve1,pve2",
    topic: SIM,
    arg: "LIST",
    help: "cluster node names (the template, VM 9000, is on the first)",
  },
  "token-id": {
    kind: "string",
    default: "bigfleet@pve!autoscaler",
    topic: SIM,
    arg: "ID",
    help: "the one API token id accepted",
  },
  secret: {
    kind: "string",
    default: "",
    topic: SIM,
    arg: "SECRET",
    none: "a random UUID",
    help: "the token's secret",
  },
  "cert-dir": {
    kind: "string",
    default: "",
    topic: SIM,
    arg: "DIR",
    none: "a temporary folder, removed on exit",
    help: "where the CA, the server certificate and the token file are written (kept on exit)",
  },
  "node-memory": {
    kind: "string",
    default: "",
    topic: SIM,
    arg: "MIB",
    none: "512 GiB",
    help: "each node's physical memory in MiB (a guest larger than that cannot start)",
  },
  "node-cpus": {
    kind: "string",
    default: "",
    topic: SIM,
    arg: "N",
    none: "64",
    help: "each node's logical CPUs (a guest with more vCPUs cannot start)",
  },
  "pve-version": {
    kind: "string",
    default: "8.4.1",
    topic: FAULTS,
    arg: "VERSION",
    help: "the pve-manager release to behave like (9.2.11: Proxmox VE 9's privileges and texts)",
  },
  "cut-nodes": {
    kind: "string",
    default: "",
    topic: FAULTS,
    arg: "LIST",
    none: "none",
    help: "nodes cut off from the start (not the first): calls to them answer 595",
  },
  "cut-mode": {
    kind: "string",
    default: "link",
    topic: FAULTS,
    arg: "MODE",
    help: "how --cut-nodes are cut: link (timed out, then no route) or daemons (refused)",
  },
  slow: {
    kind: "bool",
    default: false,
    topic: FAULTS,
    help: "real-PVE timings: a 3 minute clone, the guest agent after 25 s, RRD every 10 s",
  },
  "time-scale": {
    kind: "string",
    default: "",
    topic: FAULTS,
    arg: "F",
    none: "fast test timings",
    help: "real-PVE timings multiplied by F (0.01: a 1.8 s clone)",
  },
  "legacy-errors": {
    kind: "bool",
    default: false,
    topic: FAULTS,
    help: "errors without the JSON message field (pve-http-server before 5.2)",
  },
  "audit-hidden": {
    kind: "bool",
    default: false,
    topic: FAULTS,
    help: "a token without VM.Audit: listings show no guests",
  },
  "auth-fail-delay": {
    kind: "string",
    default: "0",
    topic: FAULTS,
    arg: "MS",
    help: "delay of 401 answers in ms (real PVE: 3000)",
  },
} as const;

const COMMAND: Command = {
  name: "pvesim",
  summary: "the Proxmox VE API simulator",
  usage: "[flags]",
  description:
    "A simulated Proxmox VE cluster API over HTTPS (token auth, tasks, clones, a scripted guest\n" +
    "agent) for trying the real backend without a cluster. It prints the flags that point the\n" +
    "provider at it; SIGINT or SIGTERM stops it and removes its PKI folder.",
  flags: FLAGS,
  footer: "Walk-through: docs/try-it.md. Options and fidelity: tests/pvesim/README.md.",
};

function number(flag: string, text: string): number {
  const n = Number(text);
  if (text.trim() === "" || !Number.isFinite(n) || n < 0) {
    throw new ConfigError(`--${flag}: want a number >= 0, got ${JSON.stringify(text)}`);
  }
  return n;
}

/** --node-memory / --node-cpus for every node (empty: the simulator's defaults). */
function nodeResources(nodes: string[], memory: string, cpus: string): SimOptions["nodeResources"] {
  const each = {
    ...(memory === "" ? {} : { memoryMib: positive("node-memory", memory) }),
    ...(cpus === "" ? {} : { cpus: positive("node-cpus", cpus) }),
  };
  return Object.fromEntries(nodes.map((n) => [n, each]));
}

function positive(flag: string, text: string): number {
  const n = number(flag, text);
  if (!Number.isInteger(n) || n < 1) {
    throw new ConfigError(`--${flag}: want a whole number >= 1, got ${JSON.stringify(text)}`);
  }
  return n;
}

/** --cut-nodes and --cut-mode, checked against the node list before anything starts. */
function cutsOf(v: { "cut-nodes": string; "cut-mode": string }, nodes: string[]) {
  const mode = v["cut-mode"];
  if (mode !== "link" && mode !== "daemons") {
    throw new ConfigError(`--cut-mode: want link or daemons, got ${JSON.stringify(mode)}`);
  }
  const cut = v["cut-nodes"].split(",").map((n) => n.trim()).filter((n) => n !== "");
  for (const n of cut) {
    if (!nodes.includes(n) || n === nodes[0]) {
      throw new ConfigError(`--cut-nodes: ${n} is not one of --nodes after the first`);
    }
  }
  return { mode: mode as CutMode, nodes: cut };
}

async function main(args: string[]): Promise<number> {
  let opts: SimOptions;
  let cuts: ReturnType<typeof cutsOf>;
  try {
    const p = parseArgv(FLAGS, args, { help: true });
    if (p.help) {
      await Deno.stdout.write(
        new TextEncoder().encode(helpText(COMMAND, [], "deno task pvesim")),
      );
      return 0;
    }
    const v = p.values;
    opts = {
      port: number("port", v.port),
      host: v.host,
      nodes: v.nodes.split(",").map((n) => n.trim()).filter((n) => n !== ""),
      tokenId: v["token-id"],
      tokenSecret: v.secret || undefined,
      legacyErrors: v["legacy-errors"],
      auditHidden: v["audit-hidden"],
      authFailDelayMs: number("auth-fail-delay", v["auth-fail-delay"]),
      certDir: v["cert-dir"] || undefined,
      pveVersion: v["pve-version"],
    };
    opts.nodeResources = nodeResources(opts.nodes ?? [], v["node-memory"], v["node-cpus"]);
    cuts = cutsOf(v, opts.nodes!);
    if (v.slow) opts.timing = REAL_TIMING;
    if (v["time-scale"] !== "") opts.timing = scaledTiming(number("time-scale", v["time-scale"]));
  } catch (e) {
    if (!(e instanceof ConfigError)) throw e;
    console.error(`error: ${e.message}`);
    return 2;
  }

  const sim = await startSimulator(opts);
  for (const n of cuts.nodes) sim.cutNode(n, cuts.mode);
  const dir = sim.caFile.slice(0, sim.caFile.lastIndexOf("/"));
  const tokenFile = `${dir}/token`;
  await Deno.writeTextFile(tokenFile, sim.tokenSecret + "\n", { mode: 0o600 });
  const nodes = (opts.nodes ?? ["pve1", "pve2"]).join(",");
  console.log(`pvesim listening on ${sim.url}`);
  console.log(`token id:     ${sim.tokenId}`);
  console.log(`token secret: ${sim.tokenSecret}`);
  console.log(`token file:   ${tokenFile}`);
  console.log(`CA file:      ${sim.caFile}`);
  console.log(`fingerprint:  ${sim.fingerprint}`);
  console.log(`pve version:  ${opts.pveVersion}`);
  if (cuts.nodes.length > 0) console.log(`cut off:      ${cuts.nodes.join(",")} (${cuts.mode})`);
  console.log(
    `provider flags: --proxmox-api-url=${sim.url} --proxmox-token-id=${sim.tokenId} ` +
      `--proxmox-token-file=${tokenFile} --proxmox-ca-file=${sim.caFile} --nodes=${nodes} ` +
      "--proxmox-pool=bigfleet",
  );

  const stopped = Promise.withResolvers<void>();
  const stop = () => stopped.resolve();
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
  await stopped.promise;
  // Closing removes the PKI folder it made (a --cert-dir is the caller's to keep).
  await sim.close();
  if (opts.certDir !== undefined) await Deno.remove(tokenFile).catch(() => {});
  console.log("pvesim stopped");
  return 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
