// The VMIDs clones go into. nextid reserves nothing (docs/proxmox-notes.md
// "VMID allocation and clone races"), so this process allocates under one
// mutex, holds each VMID as reserved until its Create lets it go, skips for
// a minute a VMID it just lost a race on, and stays inside the datacenter's
// next-id range and --proxmox-vmid-range, both.

import { getLogger } from "@logtape/logtape";
import type { VmidRange } from "../../config/types.ts";
import { BackendError } from "../../kit/backend.ts";
import { createMutex } from "../../async/mutex.ts";
import type { ApiClient } from "../api/client.ts";
import { ProxmoxApiError } from "../api/errors.ts";
import { DEFAULT_NEXT_ID, readDatacenterOptions } from "../cluster/datacenter.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/** How long a VMID we lost a race on is skipped: the winner may not show in nextid yet. */
const LOST_RACE_MS = 60_000;

/** How long the datacenter's next-id range is used before it is read again. */
const RANGE_MAX_AGE_MS = 60_000;

/**
 * How long the cluster's VMID listing (read when nextid answers below
 * --proxmox-vmid-range) serves a burst of Creates: every pick is confirmed
 * with `nextid?vmid=` anyway, so a stale listing costs only a retry.
 */
const LISTING_MAX_AGE_MS = 10_000;

export interface VmidAllocator {
  /** A free VMID that nobody else in this process clones into until it is released. */
  reserve(signal: AbortSignal): Promise<number>;
  /** The clone into `vmid` is over: the VMID may be handed out again. */
  release(vmid: number): void;
  /** Someone else took `vmid` between our look and our clone: skip it for a while. */
  lost(vmid: number): void;
}

export function createVmidAllocator(api: ApiClient, own: VmidRange | null): VmidAllocator {
  const mutex = createMutex();
  /** VMIDs handed to a clone POST whose Create has not let them go: nextid cannot see them yet. */
  const reserved = new Set<number>();
  /** VMIDs we just lost a race on → until when to skip them. */
  const lostRace = new Map<number, number>();
  /** The datacenter's next-id range, read again at most once a minute. */
  let range: { lower: number; upper: number; at: number } | null = null;
  /** VMIDs the cluster listed (and ones found taken since), for searches below nextid's answer. */
  let listing: { ids: Set<number>; at: number } | null = null;

  async function taken(signal: AbortSignal): Promise<Set<number>> {
    if (listing === null || Date.now() - listing.at > LISTING_MAX_AGE_MS) {
      listing = { ids: await listedVmids(api, signal), at: Date.now() };
    }
    return listing.ids;
  }

  async function vmidRange(signal: AbortSignal): Promise<{ lower: number; upper: number }> {
    if (range !== null && Date.now() - range.at < RANGE_MAX_AGE_MS) return range;
    const dc = await readDatacenterOptions(api, signal).catch((err) => {
      if (signal.aborted) throw err;
      log.warn("could not read the next-id range ({error}); using the default for a minute", {
        error: (err as Error).message,
      });
      return null;
    });
    if (dc !== null && !dc.readable && range === null) {
      log.warn(
        "the token cannot read datacenter.cfg (no Sys.Audit on /): a narrowed next-id range " +
          "is respected only from below (VMIDs are searched upward from /cluster/nextid's answer)",
      );
    }
    range = { ...(dc?.nextId ?? DEFAULT_NEXT_ID), at: Date.now() };
    return range;
  }

  /**
   * A VMID nobody else in this process is cloning into, inside both ranges:
   * nextid answers the lowest free VMID of the datacenter's range, but
   * `nextid?vmid=` checks only that one is free, so the search past our own
   * reservations (and up to --proxmox-vmid-range, with the VMIDs the cluster
   * lists skipped) is bounded here.
   */
  async function allocateVmid(signal: AbortSignal): Promise<number> {
    const parse = (v: unknown) => {
      const n = Number(v); // nextid is a string on real PVE; accept numbers too
      if (!Number.isInteger(n) || n < 100) {
        throw new BackendError(`unexpected /cluster/nextid answer ${JSON.stringify(v)}`);
      }
      return n;
    };
    const now = Date.now();
    for (const [id, until] of lostRace) if (until <= now) lostRace.delete(id);
    const datacenter = await vmidRange(signal);
    const { lower, upper } = intersect(datacenter, own);
    const free = parse(await api.get("/cluster/nextid", undefined, signal));
    // Below our range nextid's answer says nothing of it: skip what the cluster lists there.
    const listed = free < lower ? await taken(signal) : new Set<number>();
    let id = Math.max(free, lower);
    for (let tries = 0; tries < 10_000 && id < upper; id++) {
      if (reserved.has(id) || lostRace.has(id) || listed.has(id)) continue;
      if (id === free) return id;
      tries++;
      try {
        return parse(await api.get("/cluster/nextid", { vmid: id }, signal));
      } catch (err) {
        // 400: that VMID is taken; try the next one.
        if (!(err instanceof ProxmoxApiError && err.status === 400)) throw err;
        listed.add(id);
      }
    }
    const where = own === null
      ? `the datacenter's next-id range [${lower}, ${upper})`
      : `[${lower}, ${upper}), where the datacenter's next-id range ${rangeText(datacenter)} ` +
        `and --proxmox-vmid-range ${rangeText(own)} meet,`;
    throw new BackendError(
      `no free VMID in ${where} beyond the ${reserved.size} this provider is cloning into; ` +
        `widen ${own === null ? "it" : "--proxmox-vmid-range or the next-id range"} ` +
        "(Datacenter > Options > Next Free VMID Range) or wait for clones to finish",
    );
  }

  return {
    // Reserved under the mutex, so no two clones of this process pick one VMID.
    reserve: (signal) =>
      mutex.run(async () => {
        const id = await allocateVmid(signal);
        reserved.add(id);
        // Soon a VM (or someone else's, if we lose the race): the listing need not offer it again.
        listing?.ids.add(id);
        return id;
      }),
    release: (vmid) => void reserved.delete(vmid),
    lost: (vmid) => void lostRace.set(vmid, Date.now() + LOST_RACE_MS),
  };
}

/** Both ranges at once; empty (lower >= upper) when they do not meet. */
export function intersect(a: VmidRange, b: VmidRange | null): VmidRange {
  return b === null ? a : { lower: Math.max(a.lower, b.lower), upper: Math.min(a.upper, b.upper) };
}

/** `[lower, upper)` as an operator writes it: `first-last`. */
export function rangeText(r: VmidRange): string {
  return `${r.lower}-${r.upper - 1}`;
}

/** Every VMID the cluster lists (VMs, templates and containers the token may see). */
async function listedVmids(api: ApiClient, signal: AbortSignal): Promise<Set<number>> {
  const all = await api.get<unknown[]>("/cluster/resources", { type: "vm" }, signal);
  return new Set(
    (Array.isArray(all) ? all : []).map((e) => Number((e as Record<string, unknown>)?.vmid))
      .filter(Number.isInteger),
  );
}

/**
 * The startup check of --proxmox-vmid-range: it must meet the datacenter's
 * next-id range. Throws one line when they do not; a token that cannot read
 * datacenter.cfg (no Sys.Audit on /) keeps to the flag's range alone, logged.
 */
export async function checkVmidRange(
  api: ApiClient,
  own: VmidRange | null,
  signal: AbortSignal,
): Promise<void> {
  if (own === null) return;
  const dc = await readDatacenterOptions(api, signal).catch((err) => {
    if (signal.aborted) throw err;
    log.warn("could not read the next-id range ({error}); each Create checks it", {
      error: (err as Error).message,
    });
    return null;
  });
  if (dc === null) return;
  if (!dc.readable) {
    log.warn(
      "the token cannot read the datacenter's next-id range (no Sys.Audit on /): clones keep " +
        "to --proxmox-vmid-range {range} alone",
      { range: rangeText(own) },
    );
    return;
  }
  const both = intersect(dc.nextId, own);
  if (both.lower < both.upper) return;
  throw new BackendError(
    `--proxmox-vmid-range ${rangeText(own)} lies outside the datacenter's next-id range ` +
      `${rangeText(dc.nextId)}: no VMID is left for clones; move the flag's range inside it, ` +
      "or widen the next-id range (Datacenter > Options > Next Free VMID Range)",
  );
}
