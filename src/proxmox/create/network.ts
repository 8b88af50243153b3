// Create's network step: the clone's first NIC (`net0`) put on the instance
// type's bridge, VLAN tag and MTU, keeping its model, its MAC (a value
// without one gets a new one: docs/proxmox-notes.md "NIC settings") and its
// other options. Needs VM.Config.Network, and SDN.Use on the bridge (on
// `<bridge>/<tag>` for a tag). A NIC already so is left alone, so a retry
// changes nothing; a running VM takes the change only at its next start, so
// the key is returned for Create to restart it, like sizing's.

import type { InstanceType, NicSettings } from "../../config/types.ts";
import { BackendError } from "../../kit/backend.ts";
import { sleep } from "../../async/sleep.ts";
import { isTransient } from "../api/errors.ts";
import type { ProxmoxContext } from "../context.ts";
import { isPermissionError, type Located, readPendingHere, vmOf, vmPath } from "../vm/vm.ts";

/** The NIC the type sets. */
const NIC = "net0";

/** Keys of a NIC value this step owns; every other one is kept as the template has it. */
const OWNED = new Set(["bridge", "tag", "mtu"]);

/** Set net0 as the type says; returns the keys the running VM holds only as pending. */
export async function applyNetwork(
  ctx: ProxmoxContext,
  loc: Located,
  type: InstanceType,
  signal: AbortSignal,
): Promise<{ pendingUntilStart: string[] }> {
  const want = type.network;
  if (want === undefined) return { pendingUntilStart: [] };
  const { api, timing } = ctx;
  const vm = vmOf(ctx, loc);
  const read = () => readPendingHere(vm, signal);
  let view = await read();
  const done = () => isSet(view.current[NIC], want) && !view.pending.has(NIC);
  if (done()) return { pendingUntilStart: [] };
  for (let call = 0;; call++) {
    try {
      await api.put(`${vmPath(loc)}/config`, { [NIC]: nicValue(view.current[NIC], want) }, signal);
      break;
    } catch (err) {
      if (signal.aborted) throw err;
      if (!isTransient(err) || call + 1 >= timing.actionAttempts) {
        throw nicFailed(err, loc.vmid, want);
      }
      // The PUT may have landed behind the proxy error: look before repeating it.
      await sleep(timing.settleMs, signal);
      view = await read();
      if (done()) return { pendingUntilStart: [] };
    }
  }
  view = await read();
  return { pendingUntilStart: view.pending.has(NIC) ? [NIC] : [] };
}

/** A NIC value's options in order: `[key, value]`, the first being `<model>[=<MAC>]`. */
function parts(value: string): [string, string | undefined][] {
  return value.split(",").filter((p) => p !== "").map((p) => {
    const eq = p.indexOf("=");
    return eq < 0 ? [p, undefined] : [p.slice(0, eq), p.slice(eq + 1)];
  });
}

/** Whether a NIC value already has the bridge, tag and MTU asked for (and no others). */
export function isSet(value: unknown, want: NicSettings): boolean {
  if (typeof value !== "string") return false;
  const opts = new Map(parts(value));
  const num = (k: string) => opts.has(k) ? Number(opts.get(k)) : undefined;
  return opts.get("bridge") === want.bridge && num("tag") === want.tag && num("mtu") === want.mtu;
}

/**
 * The NIC value with the type's bridge, tag and MTU: the model and MAC first
 * as they were (a new `virtio` NIC when there was none), the other options kept.
 */
export function nicValue(value: unknown, want: NicSettings): string {
  const kept = typeof value === "string" && value !== ""
    ? parts(value).filter(([k], i) => i === 0 || !OWNED.has(k))
    : [["virtio", undefined] as [string, string | undefined]];
  const set: [string, string | undefined][] = [["bridge", want.bridge]];
  if (want.tag !== undefined) set.push(["tag", String(want.tag)]);
  if (want.mtu !== undefined) set.push(["mtu", String(want.mtu)]);
  return [kept[0], ...set, ...kept.slice(1)]
    .map(([k, v]) => v === undefined ? k : `${k}=${v}`).join(",");
}

function nicFailed(err: unknown, vmid: number, want: NicSettings): BackendError {
  const path = `/sdn/zones/<zone>/${want.bridge}${want.tag !== undefined ? `/${want.tag}` : ""}`;
  const vlan = want.tag !== undefined ? `, with ${want.tag} in --vlan-tags if you narrow them` : "";
  const hint = isPermissionError(err)
    ? ` (the token needs VM.Config.Network on the pool and SDN.Use on ${path}: setup-token.sh ` +
      `--set-network --bridges ${want.bridge}${vlan})`
    : "";
  return new BackendError(
    `setting net0 of VM ${vmid} to bridge ${want.bridge}${
      want.tag !== undefined ? ` tag ${want.tag}` : ""
    } failed: ${(err as Error).message}${hint}`,
  );
}
