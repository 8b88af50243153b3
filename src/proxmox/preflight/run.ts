// What every preflight check works with: the settings, a client that only
// reads, the run's deadline, the backend's context (preflight runs the
// backend's own template lookup), the token's permissions and storage.cfg,
// each read once. A check that throws is one FAIL line (guard).

import type { Config, ProxmoxConfig } from "../../config/types.ts";
import type { ApiClient } from "../api/client.ts";
import { readStorages, type StorageInfo } from "../cluster/templates.ts";
import { newContext, type ProxmoxContext } from "../context.ts";
import type { Timing } from "../timing.ts";
import { offeredTypes } from "../cluster/room_startup.ts";
import { Permissions } from "./permissions.ts";
import { type CheckResult, errText, failed, skipped } from "./result.ts";

export interface PreflightRun {
  cfg: Config;
  px: ProxmoxConfig;
  /** Refuses anything but GET. */
  api: ApiClient;
  /** Aborts at the run's deadline. */
  signal: AbortSignal;
  ctx: ProxmoxContext;
  perms: Permissions;
  /** pve-manager's major version (8 when it did not say). */
  major: number;
  /** storage.cfg as the token sees it; a failed read is not kept, the next call reads again. */
  storages(): Promise<Map<string, StorageInfo>>;
}

export function openRun(
  cfg: Config,
  api: ApiClient,
  timing: Timing,
  signal: AbortSignal,
  version: string,
): PreflightRun {
  const px = cfg.proxmox!;
  const major = Number(version.split(".")[0]);
  let storages: Promise<Map<string, StorageInfo>> | null = null;
  return {
    cfg,
    px,
    api,
    signal,
    ctx: newContext(api, px.nodes, timing, {
      room: { policy: px.room, catalog: cfg.catalog, offered: offeredTypes(cfg.offerings) },
    }),
    perms: new Permissions(api, signal),
    major: Number.isInteger(major) && major > 0 ? major : 8,
    storages() {
      if (storages === null) {
        const p = readStorages(api, signal);
        p.catch(() => storages = null);
        storages = p;
      }
      return storages;
    },
  };
}

/** A check that throws becomes one FAIL line; after the deadline, a SKIP. */
export async function guard(
  run: PreflightRun,
  check: string,
  subject: string,
  fn: () => Promise<CheckResult[]>,
): Promise<CheckResult[]> {
  if (run.signal.aborted) return [skipped(check, subject, "not checked: out of time", null)];
  try {
    return await fn();
  } catch (err) {
    if (run.signal.aborted) {
      return [failed(check, subject, "did not finish in time", "raise --timeout")];
    }
    return [failed(
      check,
      subject,
      `could not check: ${errText(err)}`,
      "fix what the error names and run preflight again",
    )];
  }
}
