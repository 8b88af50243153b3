// `machines room`: each zone's room as the running provider counts it (free
// memory and vCPUs under the capacity policy, how many more of each offered
// type fit), through its admin socket: BigFleet's API has no such notion, and
// the socket is where this provider answers its operator
// (docs/cli.md#machines-room). Its work is in room_run.ts.

import type { Command } from "./command.ts";
import { ADMIN_FLAGS } from "./admin_flags.ts";

export const ROOM_FLAGS = {
  output: {
    kind: "string",
    default: "table",
    topic: "Output",
    short: "o",
    arg: "FORMAT",
    help: "table or json",
  },
  ...ADMIN_FLAGS,
} as const;

export const room: Command = {
  name: "room",
  summary: "each zone's free memory and vCPUs, and how many more of each type fit",
  usage: "machines room [-o table|json] [--admin-socket PATH]",
  description:
    "What the provider counts on each zone's node: what its guests hold (ours and everyone\n" +
    "else's), what its policy lets them hold (--proxmox-memory-overcommit, --proxmox-memory-\n" +
    "reserve, --proxmox-cpu-overcommit), and why a zone cannot be judged (node offline, no\n" +
    "status, figures not visible to the token). A Create that does not fit is refused.",
  flags: ROOM_FLAGS,
  footer: "Exit codes: 0 shown, 1 the provider could not be reached or counts no room, 2 usage.",
  run: async (args, ctx) => (await import("./room_run.ts")).runRoom(args, ctx),
};
