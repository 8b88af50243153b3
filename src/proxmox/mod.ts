// Public surface of the real Proxmox VE backend.

export {
  type ApiOp,
  createProxmoxBackend,
  DEFAULT_TIMING,
  type ProxmoxDeps,
  type Timing,
} from "./backend.ts";
export { ProxmoxApiError, TaskFailedError, TlsTrustError, TransportError } from "./errors.ts";
