// Where the commands that act through a running provider's admin socket
// (machines recover, state backup) find it: docs/security.md#the-admin-socket.

import type { Parsed } from "../config/flags.ts";

const ADMIN = "Admin socket";

export const ADMIN_FLAGS = {
  "admin-socket": {
    kind: "string",
    default: "",
    topic: ADMIN,
    arg: "PATH",
    none: "$BIGFLEET_ADMIN_SOCKET",
    help: "the provider's admin socket: its --state path with .admin appended",
  },
  timeout: {
    kind: "string",
    default: "10m",
    topic: ADMIN,
    arg: "DURATION",
    help: "how long to wait for the provider's answer",
  },
} as const;

export type AdminFlagValues = Parsed<typeof ADMIN_FLAGS>["values"];
