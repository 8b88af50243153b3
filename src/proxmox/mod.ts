// Public surface of the real Proxmox VE backend.

export { createProxmoxBackend, type ProxmoxBackend } from "./backend.ts";
export { type ApiOp, type ProxmoxDeps, type Timing } from "./context.ts";
export { TlsTrustError } from "./errors.ts";
