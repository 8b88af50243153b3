// Counting the API calls a token made, from pveproxy's own access log in the
// rig (/var/log/pveproxy/access.log: one line per request, with the token id
// and the request line), so the counts are what the real API served.

import { run } from "./rig.ts";

const LOG = "/var/log/pveproxy/access.log";

/** A position in the access log: its line count now. */
export async function markCalls(): Promise<number> {
  return Number((await run("sh", "-c", `wc -l < ${LOG}`)).trim());
}

/** `GET /nodes/{node}/qemu/{vmid}/agent/exec-status`: the request without ids and query. */
export function callKind(method: string, path: string): string {
  const p = path.replace(/^\/api2\/json/, "").replace(/\?.*$/, "")
    .replace(/\/nodes\/[^/]+/, "/nodes/{node}")
    .replace(/\/qemu\/\d+/, "/qemu/{vmid}")
    .replace(/\/tasks\/[^/]+/, "/tasks/{upid}")
    .replace(/\/pools\/[^/]+/, "/pools/{pool}")
    .replace(/\/storage\/[^/]+/, "/storage/{storage}");
  return `${method} ${p}`;
}

export interface Calls {
  total: number;
  byKind: Record<string, number>;
}

/** The calls `tokenId` made since `mark`, by kind. */
export async function countCalls(mark: number, tokenId: string): Promise<Calls> {
  const text = await run("sh", "-c", `tail -n +${mark + 1} ${LOG}`);
  const byKind: Record<string, number> = {};
  let total = 0;
  for (const line of text.split("\n")) {
    const m = /^\S+ - (\S+) \[[^\]]*\] "(\S+) (\S+) [^"]*"/.exec(line);
    if (!m || m[1] !== tokenId) continue;
    const k = callKind(m[2], m[3]);
    byKind[k] = (byKind[k] ?? 0) + 1;
    total++;
  }
  return { total, byKind };
}
