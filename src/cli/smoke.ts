// `smoke`: the post-install proof that the template works. With the serving
// flags, one machine is walked through Create → Configure → Drain → Delete
// against the real cluster, as BigFleet would drive it (the kit, with a shard
// id and fence tokens of its own), each step printed with its duration, and
// the run ends by checking that no VM carries the machine any more. Only what
// help and dispatch need is here; the work is in smoke_run.ts.

import { FLAG_TABLE, type FlagTable } from "../config/flags.ts";
import type { Command, Context } from "./command.ts";

const SMOKE = "Smoke test";

export const SMOKE_FLAGS = {
  "bootstrap-file": {
    kind: "string",
    default: "",
    topic: SMOKE,
    arg: "PATH",
    help: "the bootstrap blob Configure delivers (required; e.g. a kubeadm join script)",
  },
  "instance-type": {
    kind: "string",
    default: "",
    topic: SMOKE,
    arg: "TYPE",
    none: "the first offering's",
    help: "instance type of the machine",
  },
  zone: {
    kind: "string",
    default: "",
    topic: SMOKE,
    arg: "ZONE",
    none: "the first offering's",
    help: "zone (node) of the machine",
  },
  "cluster-id": {
    kind: "string",
    default: "smoke",
    topic: SMOKE,
    arg: "ID",
    help: "cluster id Configure binds the machine to",
  },
  "drain-grace": {
    kind: "string",
    default: "30s",
    topic: SMOKE,
    arg: "DURATION",
    help: "grace period of the Drain",
  },
} as const;

export const FLAGS = { ...SMOKE_FLAGS, ...FLAG_TABLE } as const satisfies FlagTable;

export const smoke: Command = {
  name: "smoke",
  summary: "prove the template works: one VM through Create, Configure, Drain and Delete",
  usage: "smoke [serving flags] --bootstrap-file PATH [--instance-type T] [--zone Z]",
  description:
    "Creates one machine of the offerings' first type and zone (or --instance-type/--zone) on\n" +
    "the cluster the serving flags name, configures it with --bootstrap-file, drains and deletes\n" +
    "it, printing each step with its duration, and checks that the VM is gone. It runs under a\n" +
    "shard id of its own and never touches the provider's machines; with --state it holds the\n" +
    "state's lock, so it refuses to run while a provider serves BigFleet on that state.",
  flags: FLAGS,
  footer: "Exit 0 when every step passed, 1 when one failed (the step, its last_error and the\n" +
    "fix are printed, and the VM is deleted), 2 on a usage or configuration error. Details:\n" +
    "docs/cli.md#smoke.",
  run: async (args: string[], ctx: Context) => (await import("./smoke_run.ts")).runSmoke(args, ctx),
};
