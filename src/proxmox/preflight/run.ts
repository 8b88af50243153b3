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
  /** pve-manager's major version on the node the API URL names (8 when it did not say). */
  major: number;
  /**
   * pve-manager's version on `node` (`GET /nodes/<node>/version`, answered by
   * that node), read once; or why it could not be read.
   */
  versionOf(node: string): Promise<{ version: string } | { error: string }>;
  /** The major version on `node`: its own, else the API node's. */
  majorOf(node: string): Promise<number>;
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
  const major = majorOf(version) ?? 8;
  let storages: Promise<Map<string, StorageInfo>> | null = null;
  const versions = new Map<string, Promise<{ version: string } | { error: string }>>();
  const versionOf = (node: string) => {
    let v = versions.get(node);
    if (v === undefined) {
      v = api.get<Record<string, unknown>>(
        `/nodes/${encodeURIComponent(node)}/version`,
        undefined,
        signal,
        { attempts: 1 },
      ).then(
        (r) => ({ version: String(r?.version ?? "unknown") }),
        (err) => ({ error: errText(err) }),
      );
      versions.set(node, v);
    }
    return v;
  };
  return {
    cfg,
    px,
    api,
    signal,
    ctx: newContext(api, px.nodes, timing, {
      room: { policy: px.room, catalog: cfg.catalog, offered: offeredTypes(cfg.offerings) },
    }),
    perms: new Permissions(api, signal),
    major,
    versionOf,
    majorOf: async (node) => {
      const v = await versionOf(node);
      return ("version" in v ? majorOf(v.version) : null) ?? major;
    },
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

/** The major of a pve-manager version (`9.2.11` → 9); null when it is not one. */
function majorOf(version: string): number | null {
  const major = Number(version.split(".")[0]);
  return Number.isInteger(major) && major > 0 ? major : null;
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
