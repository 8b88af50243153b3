// Where the provider's memory goes during fleet_scale.ts's phases, for
// finding what to cut (not a benchmark of record). The provider runs with
// --inspect; the probe samples /proc/<pid>/smaps and Deno.memoryUsage()
// through the inspector while it drives 20 full Lists, then 16 lifecycle
// clients, and reports the V8 heap, external memory and native mappings at
// each phase's peak, plus allocation sites during the lifecycle phase
// (V8's sampling heap profiler, collected objects included).
//
//   deno run --allow-all --unstable-kv bench/rss_probe.ts [machines] [--sites]

import { DEFAULT_PROVIDER_CMD, fakeProviderArgs, sleep } from "../tests/harness/mod.ts";
import { RawClient, readList } from "../tests/harness/raw_client.ts";
import { lifecycleLoad } from "./lifecycle_load.ts";

const seed = Number(Deno.args.find((a) => /^\d+$/.test(a)) ?? 20_000);
const SITES = Deno.args.includes("--sites");
const LOAD_MS = Number(Deno.env.get("PROBE_LOAD_MS") ?? 6_000);
/** Stop the lifecycle phase after this many transitions, so runs on a loaded host do the same work. */
const LIMIT = Number(Deno.env.get("PROBE_TRANSITIONS") ?? Infinity);
const MIB = 1024 * 1024;

const dir = await Deno.makeTempDir({ prefix: "rss-probe-" });
const port = 20_000 + Math.floor(Math.random() * 20_000);
const inspect = port + 1;
const cmd = (Deno.env.get("BFCONF_PROVIDER_CMD")?.split(" ") ?? DEFAULT_PROVIDER_CMD).slice();
cmd.splice(cmd.length - 1, 0, `--inspect=127.0.0.1:${inspect}`);
const child = new Deno.Command(cmd[0], {
  args: [
    ...cmd.slice(1),
    ...fakeProviderArgs(
      Deno.env.get("PROBE_NOSTATE") ? { seed } : { seed, state: `${dir}/state.kv` },
    ),
    `--addr=127.0.0.1:${port}`,
  ],
  stdout: Deno.env.get("PROBE_STDOUT") ? "piped" : "null",
  stderr: "null",
}).spawn();
if (Deno.env.get("PROBE_STDOUT")) {
  const f = Deno.openSync(Deno.env.get("PROBE_STDOUT")!, {
    write: true,
    create: true,
    truncate: true,
  });
  child.stdout.pipeTo(f.writable).catch(() => {});
}
const pid = child.pid;
const addr = `127.0.0.1:${port}`;

for (let i = 0;; i++) {
  try {
    (await Deno.connect({ hostname: "127.0.0.1", port })).close();
    break;
  } catch {
    if (i > 2000) throw new Error("provider did not start");
    await sleep(10);
  }
}

// --- inspector
const targets = await (await fetch(`http://127.0.0.1:${inspect}/json/list`)).json();
const ws = new WebSocket(targets[0].webSocketDebuggerUrl);
await new Promise((r) => ws.onopen = r);
let nextId = 1;
const waiting = new Map<number, (v: unknown) => void>();
ws.onmessage = (e) => {
  const m = JSON.parse(e.data);
  if (m.id !== undefined) waiting.get(m.id)?.(m.result ?? m.error), waiting.delete(m.id);
};
// deno-lint-ignore no-explicit-any -- inspector replies are untyped JSON
function cdp(method: string, params: Record<string, unknown> = {}): Promise<any> {
  const id = nextId++;
  ws.send(JSON.stringify({ id, method, params }));
  return new Promise((r) => waiting.set(id, r));
}
async function memoryUsage() {
  const r = await cdp("Runtime.evaluate", {
    expression: "JSON.stringify(Deno.memoryUsage())",
    returnByValue: true,
  });
  return JSON.parse(r.result.value) as {
    rss: number;
    heapTotal: number;
    heapUsed: number;
    external: number;
  };
}

// --- /proc
function smaps() {
  const text = Deno.readTextFileSync(`/proc/${pid}/smaps`);
  const out: Record<string, number> = {};
  let name = "";
  for (const line of text.split("\n")) {
    const head = line.match(/^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ (\d+)\s*(.*)$/);
    if (head) {
      name = head[2] === "" ? "anon" : head[2].startsWith("/") ? "file" : head[2];
      continue;
    }
    const rss = line.match(/^Rss:\s+(\d+) kB/);
    if (rss) out[name] = (out[name] ?? 0) + Number(rss[1]) * 1024;
  }
  return out;
}
/** Anonymous mappings by start address: [size kB, rss kB]. */
function anonMaps(): Map<string, [number, number]> {
  const out = new Map<string, [number, number]>();
  let cur: string | null = null;
  for (const line of Deno.readTextFileSync(`/proc/${pid}/smaps`).split("\n")) {
    const head = line.match(/^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ (\d+)\s*(.*)$/);
    if (head) {
      cur = head[4] === "" ? head[1] : null;
      if (cur) out.set(cur, [(parseInt(head[2], 16) - parseInt(head[1], 16)) / 1024, 0]);
      continue;
    }
    const rss = line.match(/^Rss:\s+(\d+) kB/);
    if (rss && cur) out.get(cur)![1] = Number(rss[1]);
  }
  return out;
}
function diffMaps(a: Map<string, [number, number]>, b: Map<string, [number, number]>) {
  for (const [k, [size, rss]] of b) {
    const before = a.get(k)?.[1] ?? 0;
    if (Math.abs(rss - before) >= 512) {
      console.log(`  anon ${k} size ${size} kB: rss ${before} -> ${rss} kB`);
    }
  }
}
const rssNow = () =>
  Number(Deno.readTextFileSync(`/proc/${pid}/status`).match(/VmRSS:\s+(\d+)/)![1]) * 1024;

type Sample = {
  rss: number;
  anon: number;
  heap: number;
  file: number;
  v8: number;
  used: number;
  ext: number;
};
async function sample(): Promise<Sample> {
  const m = await memoryUsage();
  const s = smaps();
  return {
    rss: rssNow(),
    anon: s.anon ?? 0,
    heap: s["[heap]"] ?? 0,
    file: s.file ?? 0,
    v8: m.heapTotal,
    used: m.heapUsed,
    ext: m.external,
  };
}
function fmt(s: Sample) {
  const f = (n: number) => (n / MIB).toFixed(1).padStart(6);
  return `rss ${f(s.rss)} | anon ${f(s.anon)} [heap] ${f(s.heap)} file ${f(s.file)} | ` +
    `v8 total ${f(s.v8)} used ${f(s.used)} ext ${f(s.ext)}`;
}
async function sampling<T>(label: string, work: () => Promise<T>): Promise<T> {
  let peak: Sample | undefined;
  let going = true;
  const sampler = (async () => {
    while (going) {
      const s = await sample();
      if (!peak || s.rss > peak.rss) peak = s;
      await sleep(100);
    }
  })();
  const r = await work();
  going = false;
  await sampler;
  console.log(`${label.padEnd(14)} peak: ${fmt(peak!)}`);
  console.log(`${label.padEnd(14)} end:  ${fmt(await sample())}`);
  return r;
}

const cpu = () => {
  const rest = Deno.readTextFileSync(`/proc/${pid}/stat`).split(") ")[1].split(" ");
  return (Number(rest[11]) + Number(rest[12])) * 10;
};

await sleep(3_000);
console.log(`${Date.now()} idle           now:  ${fmt(await sample())}`);
const c = new RawClient(addr);
const ids = readList(await c.list()).map((m) => m.id);
let cpu0 = cpu();
await sampling("20 Lists", async () => {
  for (let i = 0; i < 20; i++) await c.list();
});
console.log(`CPU ms / List ${((cpu() - cpu0) / 20).toFixed(1)}`);
if (SITES) {
  await cdp("HeapProfiler.enable");
  await cdp("HeapProfiler.startSampling", {
    samplingInterval: 1024,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
}
cpu0 = cpu();
const maps0 = anonMaps();
const n = await sampling(
  "16 clients",
  async () => (await lifecycleLoad(addr, ids.slice(-16), LOAD_MS, LIMIT)).transitions,
);
console.log(`transitions ${n}, CPU µs / transition ${((cpu() - cpu0) * 1000 / n).toFixed(0)}`);
diffMaps(maps0, anonMaps());
if (SITES) {
  const { profile } = await cdp("HeapProfiler.stopSampling");
  const bySite = new Map<string, number>();
  const byFile = new Map<string, number>();
  let total = 0;
  interface ProfileNode {
    callFrame: { functionName: string; url: string; lineNumber: number };
    selfSize: number;
    children: ProfileNode[];
  }
  const walk = (node: ProfileNode, stack: string[]) => {
    const f = node.callFrame;
    const url = String(f.url).replace(/^.*\/(node_modules|npm|src|ext)\//, "$1/");
    const here = `${f.functionName || "(anon)"} ${url}:${f.lineNumber + 1}`;
    const s = [...stack, here];
    if (node.selfSize > 0) {
      total += node.selfSize;
      // Attribute to the innermost frame that is not in a builtin.
      bySite.set(here, (bySite.get(here) ?? 0) + node.selfSize);
      const file = url.split(":")[0] || "(native)";
      byFile.set(file, (byFile.get(file) ?? 0) + node.selfSize);
    }
    for (const ch of node.children) walk(ch, s);
  };
  walk(profile.head, []);
  console.log(`sampled allocations: ${(total / MIB).toFixed(1)} MiB in ${n} transitions`);
  const top = (m: Map<string, number>, k: number) =>
    [...m].sort((a, b) => b[1] - a[1]).slice(0, k).forEach(([s, b]) =>
      console.log(
        `${(b / 1024).toFixed(0).padStart(8)} KiB ${(b / n).toFixed(0).padStart(6)} B/tr  ${s}`,
      )
    );
  console.log("-- by file");
  top(byFile, 25);
  console.log("-- by site");
  top(bySite, 40);
}
await cdp("HeapProfiler.collectGarbage");
if (Deno.args.includes("--snapshot")) {
  const chunks: string[] = [];
  const onChunk = (e: MessageEvent) => {
    const m = JSON.parse(e.data);
    if (m.method === "HeapProfiler.addHeapSnapshotChunk") chunks.push(m.params.chunk);
  };
  ws.addEventListener("message", onChunk);
  await cdp("HeapProfiler.enable");
  await cdp("HeapProfiler.takeHeapSnapshot", { reportProgress: false });
  ws.removeEventListener("message", onChunk);
  Deno.writeTextFileSync("/tmp/rss/heap.heapsnapshot", chunks.join(""));
  console.log("snapshot in /tmp/rss/heap.heapsnapshot");
}
console.log(`after full GC  now:  ${fmt(await sample())}`);
c.close();
ws.close();
child.kill("SIGKILL");
await child.status;
await Deno.remove(dir, { recursive: true });
