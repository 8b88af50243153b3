// Pending config changes after qemu-server's update_vm_api: each option of
// a config PUT/POST goes to the config's [PENDING] section first (written
// option by option, so a check failing halfway leaves the earlier ones
// pending), then is applied: everything on a stopped VM
// (vmconfig_apply_pending), only what can change live on a running one
// (vmconfig_hotplug_pending: the "fast plug" options such as description,
// name, tags, protection, onboot, plus balloon and cpulimit; vcpus with cpu
// hotplug, memory with memory hotplug). The rest (cores, sockets, memory,
// ...) waits for the next start, which applies every pending change. GET
// config shows the pending values applied (`current=1`: without them); GET
// pending lists `value`, `pending` and `delete` per key.

import type { ConfigValue, VmRecord } from "./state.ts";

/** Options a running VM takes at once (fast plug, plus the cgroup and balloon knobs). */
const LIVE = new Set([
  "description",
  "hookscript",
  "lock",
  "migrate_downtime",
  "migrate_speed",
  "name",
  "onboot",
  "protection",
  "shares",
  "startup",
  "tags",
  "vmstatestorage",
  "balloon",
  "cpulimit",
  "cpuunits",
]);

/** The config's `hotplug` features (default network,disk,usb; `1` the same, `0` none). */
function hotplugFeatures(config: Record<string, ConfigValue>): Set<string> {
  const raw = config.hotplug === undefined ? "1" : String(config.hotplug);
  if (raw === "0") return new Set();
  if (raw === "1") return new Set(["network", "disk", "usb"]);
  return new Set(raw.split(",").map((f) => f.trim()));
}

function liveOnRunning(vm: VmRecord, key: string): boolean {
  if (LIVE.has(key)) return true;
  const hot = hotplugFeatures(vm.config);
  if (key === "vcpus") return hot.has("cpu");
  if (key === "memory") return hot.has("memory");
  return false;
}

/** Write one option to the pending section (persisted at once, like write_config). */
export function setPending(vm: VmRecord, key: string, value: ConfigValue): void {
  vm.pending[key] = value;
  vm.pendingDelete.delete(key);
}

/** Queue the removal of one option. */
export function deletePending(vm: VmRecord, key: string): void {
  delete vm.pending[key];
  vm.pendingDelete.add(key);
}

/** Apply what may be applied now: all of it when stopped (or `all`), the live options when running. */
export function applyPending(vm: VmRecord, all = vm.status !== "running"): void {
  for (const key of [...vm.pendingDelete]) {
    if (!all && !liveOnRunning(vm, key)) continue;
    delete vm.config[key];
    vm.pendingDelete.delete(key);
  }
  for (const [key, value] of Object.entries(vm.pending)) {
    if (!all && !liveOnRunning(vm, key)) continue;
    vm.config[key] = value;
    delete vm.pending[key];
  }
}

/** The config as GET config shows it by default: pending values applied, pending deletes gone. */
export function withPending(vm: VmRecord): Record<string, ConfigValue> {
  const out: Record<string, ConfigValue> = { ...vm.config, ...vm.pending };
  for (const key of vm.pendingDelete) delete out[key];
  return out;
}

/** GET .../pending: one entry per key with its current `value`, `pending` value and `delete` flag. */
export function pendingView(vm: VmRecord): Record<string, unknown>[] {
  const keys = new Set([
    ...Object.keys(vm.config),
    ...Object.keys(vm.pending),
    ...vm.pendingDelete,
  ]);
  return [...keys].sort().map((key) => {
    const e: Record<string, unknown> = { key };
    if (vm.config[key] !== undefined) e.value = vm.config[key];
    if (vm.pending[key] !== undefined) e.pending = vm.pending[key];
    if (vm.pendingDelete.has(key)) e.delete = 1;
    return e;
  });
}
