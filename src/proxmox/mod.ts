// Public surface of the real Proxmox VE backend.

export { createProxmoxBackend } from "./backend.ts";
export { type ApiOp, DEFAULT_TIMING, type ProxmoxDeps, type Timing } from "./context.ts";
export { ProxmoxApiError, TaskFailedError, TlsTrustError, TransportError } from "./errors.ts";
