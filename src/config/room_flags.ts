// The node-capacity flags (docs/configuration.md#node-capacity), listed in
// FLAG_TABLE (flags.ts) under the Proxmox connection topic; parsed in room.ts.

export const ROOM_FLAGS = {
  "proxmox-memory-overcommit": {
    kind: "string",
    default: "1.0",
    topic: "Proxmox connection",
    arg: "RATIO[,NODE=RATIO]",
    help: "memory guests may hold: (node memory - reserve) x RATIO; per node with NODE=RATIO",
  },
  "proxmox-memory-reserve": {
    kind: "string",
    default: "2GiB",
    topic: "Proxmox connection",
    arg: "SIZE|PCT%[,NODE=...]",
    help: "memory each node keeps for itself (e.g. 2GiB, 10%); per node with NODE=SIZE",
  },
  "proxmox-cpu-overcommit": {
    kind: "string",
    default: "4",
    topic: "Proxmox connection",
    arg: "RATIO[,NODE=RATIO]",
    help: "vCPUs guests may hold per node CPU (0: no bound on the sum); per node with NODE=RATIO",
  },
} as const;
