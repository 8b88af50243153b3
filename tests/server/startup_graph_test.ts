// What the binary loads before it serves: main.ts's static import graph, read
// with `deno info`. The other commands' work, server reflection, the
// Proxmox client and the Prometheus exposition are loaded with import() when
// used; a static import of any
// of them would put it back into every restart
// (docs/performance.md#what-loads-before-the-port-opens).

import assert from "node:assert/strict";
import { REPO_ROOT } from "../harness/mod.ts";

interface Dependency {
  code?: { specifier: string };
  isDynamic?: boolean;
}
interface Info {
  roots: string[];
  modules: { specifier: string; dependencies?: Dependency[] }[];
}

async function moduleInfo(): Promise<Info> {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["info", "--json", "main.ts"],
    cwd: REPO_ROOT,
    stderr: "inherit",
  }).output();
  assert.equal(out.code, 0);
  return JSON.parse(new TextDecoder().decode(out.stdout));
}

/** Modules reachable from the root through static imports only (type-only imports carry no code). */
function staticGraph(info: Info): Set<string> {
  const byName = new Map(info.modules.map((m) => [m.specifier, m]));
  const seen = new Set<string>();
  const todo = [...info.roots];
  while (todo.length > 0) {
    const s = todo.pop()!;
    if (seen.has(s)) continue;
    seen.add(s);
    for (const d of byName.get(s)?.dependencies ?? []) {
      if (d.code && !d.isDynamic) todo.push(d.code.specifier);
    }
  }
  return seen;
}

const local = (s: string) => s.startsWith("file://") ? s.slice(`file://${REPO_ROOT}`.length) : null;
const npmName = (s: string) => s.match(/^npm:\/?(@?[^@]+)/)?.[1] ?? null;

Deno.test("startup graph: serving loads grpc-js, protobufjs and logtape, nothing only other work needs (prom-client after the port opens)", async () => {
  const info = await moduleInfo();
  const loaded = staticGraph(info);
  const npm = new Set([...loaded].map(npmName).filter((n) => n !== null));
  assert.deepEqual([...npm].sort(), [
    "@grpc/grpc-js",
    "@logtape/logtape",
    "protobufjs",
  ]);
  const files = [...loaded].map(local).filter((f) => f !== null);
  const lazy = [
    "src/server/reflection_service.ts",
    "src/cli/machines_run.ts",
    "src/proxmox/preflight/preflight.ts",
    "src/cli/preflight_report.ts",
    "src/client/wire.ts",
    "src/proxmox/mod.ts",
    "src/server/metrics_prom.ts",
  ];
  for (const f of lazy) assert.ok(!files.includes(f), `${f} is imported statically`);
  assert.deepEqual(files.filter((f) => f.startsWith("src/proxmox/")), []);
  // Still in the whole graph, so `deno compile` bundles them.
  const all = new Set(info.modules.map((m) => local(m.specifier)));
  for (const f of lazy) assert.ok(all.has(f), `${f} is not reachable at all`);
});
