// The VMIDs clones go into. nextid reserves nothing (docs/proxmox-notes.md
// "VMID allocation and clone races"), so this process allocates under one
// mutex, holds each VMID as reserved until its Create lets it go, skips for
// a minute a VMID it just lost a race on, and stays inside the datacenter's
// next-id range.

import { getLogger } from "@logtape/logtape";
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

export interface VmidAllocator {
  /** A free VMID that nobody else in this process clones into until it is released. */
  reserve(signal: AbortSignal): Promise<number>;
  /** The clone into `vmid` is over: the VMID may be handed out again. */
  release(vmid: number): void;
  /** Someone else took `vmid` between our look and our clone: skip it for a while. */
  lost(vmid: number): void;
}

export function createVmidAllocator(api: ApiClient): VmidAllocator {
  const mutex = createMutex();
  /** VMIDs handed to a clone POST whose Create has not let them go: nextid cannot see them yet. */
  const reserved = new Set<number>();
  /** VMIDs we just lost a race on → until when to skip them. */
  const lostRace = new Map<number, number>();
  /** The datacenter's next-id range, read again at most once a minute. */
  let range: { lower: number; upper: number; at: number } | null = null;

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
   * A VMID nobody else in this process is cloning into, inside the
   * datacenter's next-id range: nextid answers the lowest free VMID there,
   * but `nextid?vmid=` checks only that one is free, so the search past our
   * own reservations is bounded here.
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
    const { lower, upper } = await vmidRange(signal);
    let id = parse(await api.get("/cluster/nextid", undefined, signal));
    for (let tries = 0; tries < 10_000 && id < upper; tries++, id++) {
      if (id < lower || reserved.has(id) || lostRace.has(id)) continue;
      if (tries === 0) return id;
      try {
        return parse(await api.get("/cluster/nextid", { vmid: id }, signal));
      } catch (err) {
        // 400: that VMID is taken; try the next one.
        if (!(err instanceof ProxmoxApiError && err.status === 400)) throw err;
      }
    }
    throw new BackendError(
      `no free VMID in the datacenter's next-id range [${lower}, ${upper}) beyond the ` +
        `${reserved.size} this provider is cloning into; widen it (Datacenter > Options > ` +
        `Next Free VMID Range) or wait for clones to finish`,
    );
  }

  return {
    // Reserved under the mutex, so no two clones of this process pick one VMID.
    reserve: (signal) =>
      mutex.run(async () => {
        const id = await allocateVmid(signal);
        reserved.add(id);
        return id;
      }),
    release: (vmid) => void reserved.delete(vmid),
    lost: (vmid) => void lostRace.set(vmid, Date.now() + LOST_RACE_MS),
  };
}
