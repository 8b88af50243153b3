// VM status, config (sync PUT / async POST), start, stop and destroy.

import {
  ApiError,
  fail,
  forbidden,
  lockedError,
  noConfig,
  paramError,
  TaskFailure,
} from "../errors.ts";
import { takeTaskError } from "../faults.ts";
import {
  dnsName,
  memoryFormat,
  memoryValue,
  NODE,
  normaliseTags,
  type Params,
  rejectSkiplock,
  type Schema,
  tagList,
  VMID,
} from "../params.ts";
import type { Route, RouteCtx, SimCore } from "../router.ts";
import { agentEnabled, agentValid, usageStats, type VmRecord } from "../state.ts";
import { vmFigures } from "../capacity.ts";
import { NIC_SCHEMA, prepareNics } from "../nic.ts";
import { assertStartable } from "../startcheck.ts";
import { assertBaseUnused } from "../clonedisk.ts";
import { descriptionAsRead } from "../codec.ts";
import { destroyDisks } from "../destroy.ts";
import { mayOnVm, requireOnVm } from "../acl.ts";
import { applyPending, deletePending, pendingView, setPending } from "../pending.ts";
import { assertTagPermissions } from "../policy.ts";
import { TaskDied } from "../tasks.ts";
import { statusExtras } from "../versions.ts";
import { checkNode } from "./nodes.ts";

export const vmPerm = (priv: string) => (p: Params): [string, string] => [`/vms/${p.vmid}`, priv];

/** `check => ['perm', '/vms/{vmid}', [priv]]` under the ACL model, pool-derived rights included. */
export const vmCheck = (priv: string) => (core: SimCore, p: Params) =>
  requireOnVm(core, p.vmid as number, priv);

/** update_vm's `['perm', '/vms/{vmid}', $vm_config_perm_list, any => 1]`: one of them will do. */
const CONFIG_PRIVS = [
  "VM.Config.Disk",
  "VM.Config.CDROM",
  "VM.Config.CPU",
  "VM.Config.Memory",
  "VM.Config.Network",
  "VM.Config.HWType",
  "VM.Config.Options",
  "VM.Config.Cloudinit",
];
function configCheck(core: SimCore, p: Params): void {
  const vmid = p.vmid as number;
  if (!CONFIG_PRIVS.some((priv) => mayOnVm(core, vmid, priv))) {
    throw forbidden(`/vms/${vmid}`, CONFIG_PRIVS.join("|"));
  }
}

/** Node check + the VM as that node sees it. */
export function openVm(core: SimCore, params: Params): VmRecord {
  checkNode(core, params.node as string);
  return core.state.vmOn(params.node as string, params.vmid as number);
}

function statusCurrent(core: SimCore, vm: VmRecord): Record<string, unknown> {
  const c = vm.config;
  const running = vm.status === "running";
  const out: Record<string, unknown> = {
    vmid: vm.vmid,
    status: vm.status,
    name: c.name !== undefined ? String(c.name) : `VM ${vm.vmid}`,
    ...usageStats(vm, running),
    ...vmFigures(core, vm),
    ha: { managed: 0 },
  };
  if (running) {
    out.qmpstatus = "running";
    out.pid = vm.qemuPid;
    out["running-machine"] = "pc-i440fx-9.2+pve1";
    out["running-qemu"] = "9.2.0";
  }
  if (c.lock !== undefined) out.lock = String(c.lock);
  if (c.tags !== undefined) out.tags = String(c.tags);
  if (c.template) out.template = 1;
  if (agentEnabled(c.agent)) out.agent = 1;
  return out;
}

/** pve-qm-agent: a bare value must be 1 or 0; `enabled=` takes every boolean spelling. */
function agentFormat(v: string): string | null {
  return agentValid(v) ? null : "invalid format - format error\n";
}

const CONFIG_SCHEMA: Schema = {
  node: NODE,
  vmid: VMID,
  cores: { type: "integer", optional: true, min: 1, max: 1024 },
  sockets: { type: "integer", optional: true, min: 1, max: 4 },
  vcpus: { type: "integer", optional: true, min: 1, max: 512 },
  cpulimit: { type: "string", optional: true },
  protection: { type: "boolean", optional: true },
  memory: { type: "string", optional: true, format: memoryFormat },
  balloon: { type: "integer", optional: true, min: 0 },
  name: { type: "string", optional: true, format: dnsName },
  description: { type: "string", optional: true, maxLength: 8192 },
  tags: { type: "string", optional: true, format: tagList },
  agent: { type: "string", optional: true, format: agentFormat },
  onboot: { type: "boolean", optional: true },
  delete: { type: "string", optional: true },
  revert: { type: "string", optional: true },
  digest: { type: "string", optional: true, maxLength: 64 },
  skiplock: { type: "boolean", optional: true },
  ...NIC_SCHEMA,
};

const META = new Set(["node", "vmid", "digest", "skiplock", "background_delay"]);

/** qemu-server config options `delete` may name (a subset; indexed ones by pattern). */
const OPTIONS = new Set([
  "acpi",
  "agent",
  "args",
  "autostart",
  "balloon",
  "bios",
  "boot",
  "bootdisk",
  "cicustom",
  "cipassword",
  "citype",
  "ciuser",
  "cores",
  "cpu",
  "cpulimit",
  "cpuunits",
  "description",
  "efidisk0",
  "freeze",
  "hookscript",
  "hotplug",
  "hugepages",
  "kvm",
  "localtime",
  "lock",
  "machine",
  "memory",
  "name",
  "nameserver",
  "numa",
  "onboot",
  "ostype",
  "protection",
  "reboot",
  "scsihw",
  "searchdomain",
  "shares",
  "smbios1",
  "sockets",
  "sshkeys",
  "startup",
  "tablet",
  "tags",
  "template",
  "tpmstate0",
  "vcpus",
  "vga",
  "vmgenid",
  "vmstatestorage",
  "watchdog",
]);
const INDEXED_OPTION = /^(ide|sata|scsi|virtio|net|unused|serial|usb|hostpci|numa|ipconfig)\d+$/;

/** update_vm_api's `delete` checks: 400s before anything changes; unset keys are only warned about. */
function deleteList(params: Params): string[] {
  if (params.delete === undefined) return [];
  const keys = String(params.delete).split(/[,;\s]+/).filter(Boolean)
    .map((k) => (k === "cdrom" ? "ide2" : k));
  for (const k of keys) {
    if (params[k] !== undefined) {
      throw paramError({ delete: `you can't use '-${k}' and -delete ${k}' at the same time` });
    }
    if (!OPTIONS.has(k) && !INDEXED_OPTION.test(k)) {
      throw paramError({ delete: `unknown option '${k}'` });
    }
  }
  return keys;
}

/** The privilege update_vm_api checks for one option ($check_vm_modify_config_perm). */
function optionPriv(key: string): string {
  if (["cores", "sockets", "vcpus", "cpulimit", "cpuunits", "cpu", "numa"].includes(key)) {
    return "VM.Config.CPU";
  }
  if (["memory", "balloon", "shares"].includes(key)) return "VM.Config.Memory";
  return /^net\d+$/.test(key) ? "VM.Config.Network" : "VM.Config.Options";
}

/**
 * The config update shared by PUT (sync) and POST (in a qmconfig task), as
 * update_vm_api runs it: permission checks per option, then deletes and
 * sets written to the pending section one by one (tags checked against the
 * datacenter's tag policy as they come, so a refused tag leaves the options
 * before it pending), then applied as far as the VM's state allows.
 */
function applyConfig(core: SimCore, vm: VmRecord, params: Params): void {
  const keys = Object.keys(params).filter((k) => !META.has(k));
  if (keys.length === 0) throw fail("no options specified");
  const deletes = deleteList(params);
  for (const k of [...keys.filter((k) => k !== "delete" && k !== "revert"), ...deletes]) {
    if (k !== "tags") requireOnVm(core, vm.vmid, optionPriv(k));
  }
  params = prepareNics(core, vm, params, deletes);
  core.state.checkLock(vm);
  if (params.digest !== undefined && params.digest !== core.state.digest(vm)) {
    throw fail("checksum mismatch (file change by other user?)");
  }
  const c = vm.config;
  const memory = params.memory !== undefined ? memoryValue(String(params.memory)) : undefined;
  const balloon = params.balloon !== undefined ? Number(params.balloon) : Number(c.balloon ?? 0);
  const effMem = memory ?? memoryValue(String(c.memory ?? "512"));
  if (balloon > effMem) {
    throw fail("balloon value too large (must be smaller than assigned memory)");
  }
  const nameBefore = c.name;
  for (const k of deletes) {
    if (k === "tags") {
      requireOnVm(core, vm.vmid, "VM.Config.Options");
      assertTagPermissions(core, c.tags, "");
      delete c.tags;
    } else deletePending(vm, k);
  }
  for (const k of keys) {
    const v = params[k];
    if (k === "delete" || k === "revert") continue;
    if (k === "tags") {
      requireOnVm(core, vm.vmid, "VM.Config.Options");
      assertTagPermissions(core, c.tags, v);
      const t = normaliseTags(String(v));
      if (t === "") deletePending(vm, "tags");
      else setPending(vm, "tags", t);
    } else if (k === "memory") setPending(vm, k, String(memory));
    else if (typeof v === "boolean") setPending(vm, k, v ? 1 : 0);
    else setPending(vm, k, v as string | number);
  }
  applyPending(vm);
  if (c.name !== nameBefore) core.state.publish(vm);
}

function vmTask(
  ctx: RouteCtx,
  type: "qmstart" | "qmstop" | "qmdestroy" | "qmconfig",
  work: (vm: VmRecord | undefined, log: string[]) => Promise<number | void>,
): string {
  const { core, params, authid } = ctx;
  const node = params.node as string;
  const vmid = params.vmid as number;
  const t = core.tasks.start(node, type, String(vmid), authid, (task) => {
    const vm = core.state.vms.get(vmid);
    return work(vm && vm.node === node ? vm : undefined, task.log);
  });
  return t.upid;
}

function injected(core: SimCore, type: "qmstart" | "qmstop" | "qmdestroy" | "qmconfig"): void {
  const e = takeTaskError(core.faults, type);
  if (e !== undefined) throw new TaskFailure(e);
}

/** AbstractConfig check_protection, as destroy uses it. */
function checkProtection(vm: VmRecord): void {
  if (Number(vm.config.protection ?? 0)) {
    throw fail(`can't remove VM ${vm.vmid} - protection mode enabled`);
  }
}

/** Lock check inside a worker: the text ends up in the task exitstatus. */
function taskCheckLock(vm: VmRecord): void {
  if (vm.config.lock !== undefined) {
    throw new TaskFailure(lockedError(String(vm.config.lock)).message);
  }
}

export const qemuRoutes: Route[] = [
  {
    method: "GET",
    pattern: "/nodes/{node}/qemu/{vmid}/status/current",
    schema: { node: NODE, vmid: VMID },
    perm: vmPerm("VM.Audit"),
    check: vmCheck("VM.Audit"),
    handler: ({ core, params }) => statusExtras(core, statusCurrent(core, openVm(core, params))),
  },
  {
    method: "GET",
    pattern: "/nodes/{node}/qemu/{vmid}/config",
    schema: {
      node: NODE,
      vmid: VMID,
      current: { type: "boolean", optional: true },
      snapshot: { type: "string", optional: true },
    },
    perm: vmPerm("VM.Audit"),
    check: vmCheck("VM.Audit"),
    handler: ({ core, params }) => {
      const view = core.state.configView(openVm(core, params), params.current === true);
      // parse_vm_config drops a value it cannot parse.
      if (view.agent !== undefined && !agentValid(view.agent)) delete view.agent;
      // The description lives in `#` comment lines: pve-common's codec applies.
      if (view.description !== undefined) {
        view.description = descriptionAsRead(String(view.description), core.pveVersion);
      }
      return view;
    },
  },
  {
    method: "GET",
    pattern: "/nodes/{node}/qemu/{vmid}/pending",
    schema: { node: NODE, vmid: VMID },
    perm: vmPerm("VM.Audit"),
    check: vmCheck("VM.Audit"),
    handler: ({ core, params }) => {
      const vm = openVm(core, params);
      const out = pendingView(vm);
      out.push({ key: "digest", value: core.state.digest(vm) });
      for (const e of out) {
        for (const f of ["value", "pending"]) {
          if (e.key === "description" && e[f] !== undefined) {
            e[f] = descriptionAsRead(String(e[f]), core.pveVersion);
          }
        }
      }
      return out;
    },
  },
  {
    method: "PUT",
    pattern: "/nodes/{node}/qemu/{vmid}/config",
    schema: CONFIG_SCHEMA,
    perm: vmPerm("VM.Config.Options"),
    check: configCheck,
    handler: ({ core, params }) => {
      rejectSkiplock(params);
      applyConfig(core, openVm(core, params), params);
      return null;
    },
  },
  {
    method: "POST",
    pattern: "/nodes/{node}/qemu/{vmid}/config",
    schema: { ...CONFIG_SCHEMA, background_delay: { type: "integer", optional: true, min: 1 } },
    perm: vmPerm("VM.Config.Options"),
    check: configCheck,
    handler: (ctx) => {
      rejectSkiplock(ctx.params);
      openVm(ctx.core, ctx.params);
      return vmTask(ctx, "qmconfig", async (vm) => {
        await ctx.core.timers.sleep(ctx.core.state.timing.taskMs);
        if (!vm) {
          throw new TaskFailure(
            noConfig(ctx.params.node as string, ctx.params.vmid as number).message,
          );
        }
        injected(ctx.core, "qmconfig");
        try {
          applyConfig(ctx.core, vm, ctx.params);
        } catch (e) {
          throw new TaskFailure(e instanceof ApiError ? e.message : String(e));
        }
      });
    },
  },
  {
    method: "POST",
    pattern: "/nodes/{node}/qemu/{vmid}/status/start",
    schema: {
      node: NODE,
      vmid: VMID,
      timeout: { type: "integer", optional: true, min: 0 },
      skiplock: { type: "boolean", optional: true },
    },
    perm: vmPerm("VM.PowerMgmt"),
    check: vmCheck("VM.PowerMgmt"),
    handler: (ctx) => {
      rejectSkiplock(ctx.params);
      checkNode(ctx.core, ctx.params.node as string);
      // No existence check before the fork: a missing VM fails in the task.
      return vmTask(ctx, "qmstart", async (vm, log) => {
        const { core, params } = ctx;
        if (!vm) {
          throw new TaskFailure(noConfig(params.node as string, params.vmid as number).message);
        }
        taskCheckLock(vm);
        if (vm.status === "running") throw new TaskFailure(`VM ${vm.vmid} already running`);
        injected(core, "qmstart");
        await core.timers.sleep(core.state.timing.taskMs);
        if (core.state.vms.get(vm.vmid) !== vm) {
          throw new TaskFailure(noConfig(params.node as string, params.vmid as number).message);
        }
        // vm_start applies every pending change first.
        applyPending(vm, true);
        assertStartable(core, vm, log);
        core.state.setRunning(vm, true);
      });
    },
  },
  {
    method: "POST",
    pattern: "/nodes/{node}/qemu/{vmid}/status/stop",
    schema: {
      node: NODE,
      vmid: VMID,
      timeout: { type: "integer", optional: true, min: 0 },
      keepActive: { type: "boolean", optional: true },
      "overrule-shutdown": { type: "boolean", optional: true },
      skiplock: { type: "boolean", optional: true },
    },
    perm: vmPerm("VM.PowerMgmt"),
    check: vmCheck("VM.PowerMgmt"),
    handler: (ctx) => {
      rejectSkiplock(ctx.params);
      if (ctx.params.keepActive !== undefined) {
        throw paramError({ keepActive: "Only root may use this option." });
      }
      checkNode(ctx.core, ctx.params.node as string);
      return vmTask(ctx, "qmstop", async (vm) => {
        const { core, params } = ctx;
        if (!vm) {
          throw new TaskFailure(
            `unable to find configuration file for VM ${params.vmid} on node '${params.node}'`,
          );
        }
        taskCheckLock(vm);
        injected(core, "qmstop");
        await core.timers.sleep(core.state.timing.taskMs);
        // Stopping a stopped VM is a no-op that ends OK.
        if (vm.status === "running") core.state.setRunning(vm, false);
      });
    },
  },
  {
    method: "DELETE",
    pattern: "/nodes/{node}/qemu/{vmid}",
    schema: {
      node: NODE,
      vmid: VMID,
      purge: { type: "boolean", optional: true },
      "destroy-unreferenced-disks": { type: "boolean", optional: true },
      skiplock: { type: "boolean", optional: true },
    },
    perm: vmPerm("VM.Allocate"),
    check: vmCheck("VM.Allocate"),
    handler: (ctx) => {
      rejectSkiplock(ctx.params);
      const vm = openVm(ctx.core, ctx.params);
      // Checked before the fork, so these are synchronous 500s.
      checkProtection(vm);
      if (vm.status === "running") throw fail(`VM ${vm.vmid} is running - destroy failed`);
      return vmTask(ctx, "qmdestroy", async (v, log) => {
        const { core, params } = ctx;
        if (!v) {
          throw new TaskFailure(noConfig(params.node as string, params.vmid as number).message);
        }
        taskCheckLock(v);
        try {
          checkProtection(v);
        } catch (e) {
          throw new TaskFailure((e as Error).message);
        }
        assertBaseUnused(core, v);
        if (v.status === "running") {
          throw new TaskFailure(`VM ${v.vmid} is running - destroy failed`);
        }
        injected(core, "qmdestroy");
        const disks = destroyDisks(core, v, params["destroy-unreferenced-disks"] === true);
        log.push(...disks.log);
        // destroy_vm's replacement config: only the lock is left.
        v.config = { lock: "destroyed" };
        v.pending = {};
        v.pendingDelete.clear();
        await core.timers.sleep(core.state.timing.taskMs / 2);
        if (core.faults.destroyDies > 0) {
          core.faults.destroyDies--;
          throw new TaskDied();
        }
        // remove_vm_access: the VMID leaves its pool (and its ACLs) before the config goes.
        v.pool = undefined;
        if (params.purge === true) log.push(`purging VM ${v.vmid} from related configurations..`);
        await core.timers.sleep(core.state.timing.taskMs / 2);
        if (core.state.vms.get(v.vmid) === v) core.state.vms.delete(v.vmid);
        return disks.warnings;
      });
    },
  },
];
