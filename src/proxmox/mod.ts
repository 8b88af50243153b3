// Public surface of the real Proxmox VE backend, and of the checks `preflight`
// runs against a cluster before it goes live (src/cli/preflight.ts reports them).

export { createProxmoxBackend, type ProxmoxBackend } from "./backend.ts";
export type { ApiOp, ProxmoxDeps } from "./context.ts";
export type { Timing } from "./timing.ts";
export { TlsTrustError } from "./api/errors.ts";
export {
  type PreflightOptions,
  type PreflightReport,
  runPreflight,
} from "./preflight/preflight.ts";
export { type CheckResult, plural, skipped, type Status } from "./preflight/result.ts";
export { guestFix } from "./vm/guest_caps.ts";
