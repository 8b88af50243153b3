// The checks behind `preflight` (docs/cli.md#preflight): against the cluster
// the flags name, with the same code the backend runs (TLS trust, node list,
// template lookup, clone reachability, storage.cfg), and only ever reading:
// the client handed to every check refuses anything but GET. The command
// (src/cli/preflight.ts) runs them and reports what they found.

import type { Config } from "../../config/types.ts";
import { DEFAULT_TIMING, type Timing } from "../timing.ts";
import { connect } from "./connection.ts";
import { guestChecks } from "./guest.ts";
import { hooksCheck } from "./hooks.ts";
import { nodeChecks } from "./nodes.ts";
import { poolCheck } from "./pool.ts";
import { privilegeChecks } from "./privileges.ts";
import { roomChecks } from "./room.ts";
import type { CheckResult } from "./result.ts";
import { guard, openRun, type PreflightRun } from "./run.ts";
import { storageChecks, storageDemand } from "./storage.ts";
import { tagCheck } from "./tags.ts";
import { type Found, templateChecks } from "./templates.ts";

export interface PreflightReport {
  results: CheckResult[];
  /** pve-manager version the API reported, when it was reached. */
  pveVersion: string | null;
}

export interface PreflightOptions {
  /** Bound of the whole run. */
  deadlineMs: number;
}

/** Run every check against the cluster `cfg` names (cfg.proxmox must be set). */
export async function runPreflight(cfg: Config, opts: PreflightOptions): Promise<PreflightReport> {
  const px = cfg.proxmox!;
  const signal = AbortSignal.timeout(opts.deadlineMs);
  const timing: Timing = {
    ...DEFAULT_TIMING,
    requestTimeoutMs: Math.min(30_000, opts.deadlineMs),
    readAttempts: 2,
    retryBaseMs: 250,
    probeTimeoutMs: Math.min(15_000, opts.deadlineMs),
  };
  const conn = await connect(px, timing, signal);
  if (conn.api === null) return { results: conn.results, pveVersion: null };
  try {
    const run = openRun(cfg, conn.api, timing, signal, conn.version ?? "");
    return { results: [...conn.results, ...await checkCluster(run)], pveVersion: conn.version };
  } finally {
    conn.api.close();
  }
}

/** The checks after the connection, in order; printed grouped as the report lists them. */
async function checkCluster(run: PreflightRun): Promise<CheckResult[]> {
  const nodes = await guard(run, "node", run.px.nodes.join(","), () => nodeChecks(run));
  const usable = new Set(
    run.px.nodes.filter((n) => !nodes.some((r) => r.subject === n && r.status === "FAIL")),
  );
  const pool = await guard(run, "pool", run.px.pool || "(none)", () => poolCheck(run));
  const found: Found[] = [];
  const templates = await guard(run, "template", "", () => templateChecks(run, usable, found));
  const demand = await storageDemand(run, found);
  const storage = await guard(run, "storage", "", () => storageChecks(run, demand));
  const privileges = await guard(
    run,
    "privileges",
    "",
    () => privilegeChecks(run, found, [...demand.values()]),
  );
  const room = await guard(run, "room", "", () => roomChecks(run));
  const tags = await guard(
    run,
    "tags",
    run.px.tags.join(",") || "(none)",
    () => tagCheck(run, found),
  );
  const guest = await guard(run, "guest", "", () => guestChecks(run, found));
  return [
    ...nodes,
    ...pool,
    ...privileges,
    ...tags,
    ...templates,
    ...storage,
    ...room,
    ...guest,
    hooksCheck(run.cfg),
  ];
}
