// `machines recover ID --destroy|--adopt [--yes]`: an operator's intervention
// on a FAILED machine, through the running provider's admin socket
// (docs/troubleshooting.md#machines-failed). Without --yes it only says what
// it would do. Its work is in recover_run.ts, loaded when it runs.

import { type Command, EXIT_NOT_FOUND } from "./command.ts";
import { ADMIN_FLAGS } from "./admin_flags.ts";

const ACTION = "Action";

export const RECOVER_FLAGS = {
  destroy: {
    kind: "bool",
    default: false,
    topic: ACTION,
    help: "stop and destroy the machine's VM, if any, and return the slot to SPECULATIVE",
  },
  adopt: {
    kind: "bool",
    default: false,
    topic: ACTION,
    help: "a FAILED Create whose VM runs, answers on its agent and is sized right: make it IDLE",
  },
  yes: {
    kind: "bool",
    default: false,
    topic: ACTION,
    help: "do it (without: only show what would be done)",
  },
  ...ADMIN_FLAGS,
} as const;

export const recover: Command = {
  name: "recover",
  summary: "destroy or adopt the VM of a FAILED machine (through the provider's admin socket)",
  usage: "machines recover ID --destroy|--adopt [--yes] [--admin-socket PATH]",
  description:
    "FAILED is terminal on the BigFleet API; this is the operator's way out. The provider does\n" +
    "it and records it (revision, audit log line, metric); BigFleet sees the result on its next List.",
  flags: RECOVER_FLAGS,
  footer: "Refused for a machine that is not FAILED, and --adopt for a VM that is not usable.\n" +
    `Exit codes: 0 done (or shown), 1 refused or failed, 2 usage, ${EXIT_NOT_FOUND} no such machine.`,
  run: async (args, ctx) => (await import("./recover_run.ts")).runRecover(args, ctx),
};
