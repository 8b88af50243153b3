// `state backup FILE`: a consistent online copy of a running provider's state,
// made by the provider itself through its admin socket
// (docs/install.md#backup-and-restore). Its work is in backup_run.ts, loaded
// when it runs.

import type { Command } from "./command.ts";
import { ADMIN_FLAGS } from "./admin_flags.ts";

const backup: Command = {
  name: "backup",
  summary: "write a consistent copy of a running provider's state to FILE (- for stdout)",
  usage: "state backup FILE [--admin-socket PATH]",
  description:
    "The provider copies its whole state (machines, fence marks, revision) as it is at one\n" +
    "instant into a fresh state file and sends it here; the live file and its -wal/-shm are not\n" +
    "copied, so the copy is never torn. FILE must not exist; it is written whole or not at all.",
  flags: ADMIN_FLAGS,
  footer:
    "Restore: stop the provider, put FILE at its --state path (with no -wal/-shm beside it),\n" +
    "start it. What an older copy means: docs/install.md#backup-and-restore.",
  run: async (args, ctx) => (await import("./backup_run.ts")).runBackup(args, ctx),
};

export const stateCommand: Command = {
  name: "state",
  summary: "back up the durable state of a running provider",
  usage: "state backup FILE [flags]",
  subcommands: [backup],
};
