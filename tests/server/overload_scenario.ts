// The overload scenario shared by tests/server/overload_test.ts (ratios) and
// bench/hostile.ts (absolute figures): the mix of hostile clients against one
// provider, and honest Gets timed against it and an identical quiet provider
// in alternation, so both see the same machine load.

import { ProviderClient } from "../harness/mod.ts";
import type { ProviderProcess } from "../harness/mod.ts";
import {
  type Hostile,
  idleConnections,
  nonReader,
  slowLoris,
  stalledUpload,
} from "./hostile_clients.ts";

const MIB = 1024 * 1024;

export interface HostileMix {
  /** 1,000 connections that never send a byte. */
  idle: Hostile;
  /** 20 connections trickling the preface, one byte a second. */
  loris: Hostile;
  /** One Configure declaring a 5 MiB message, 60 KB of it sent, then silence. */
  stalled: Hostile;
  /** 10,000 Get streams (50 every 20 ms), answers never read. */
  getFlood: Hostile & { sent(): number };
  /** 10,000 List streams (25 every 50 ms), answers never read, windows wide open. */
  listFlood: Hostile & { sent(): number };
  close(): void;
}

export async function startHostileMix(port: number): Promise<HostileMix> {
  const mix = {
    idle: await idleConnections(port, 1_000),
    loris: await slowLoris(port, 20, 1_000),
    stalled: await stalledUpload(port, "Configure", 5 * MIB, 60_000),
    getFlood: await nonReader(port, "Get", 10_000, 50, 20),
    listFlood: await nonReader(port, "List", 10_000, 25, 50),
  };
  return {
    ...mix,
    close() {
      for (const h of Object.values(mix)) h.close();
    },
  };
}

export interface Honest {
  client: ProviderClient;
  id: string;
  /** Milliseconds of each timed Get. */
  times: number[];
}

export async function honestClient(proc: ProviderProcess): Promise<Honest> {
  const client = new ProviderClient(proc.addr, { deadlineMs: 10_000 });
  const id = (await client.list({ max_results: 1 })).machines[0].id;
  return { client, id, times: [] };
}

/** `n` Gets on each side, alternating; throws on any failed or wrong answer. */
export async function alternateGets(sides: Honest[], n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    for (const s of i % 2 ? sides : [...sides].reverse()) {
      const t0 = performance.now();
      const m = await s.client.get({ id: s.id });
      s.times.push(performance.now() - t0);
      if (m.id !== s.id) throw new Error(`Get ${s.id} answered ${m.id}`);
    }
  }
}

export function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.ceil(p * sorted.length) - 1)];
}

/**
 * Resident memory of a live process, in MiB (NaN once it has exited). Read
 * through `cat`: Deno opens another process's /proc files only under
 * --allow-all, the suite runs with --allow-run.
 */
export async function rssMib(pid: number): Promise<number> {
  const out = await new Deno.Command("cat", {
    args: [`/proc/${pid}/status`],
    stdout: "piped",
    stderr: "null",
  }).output();
  const m = new TextDecoder().decode(out.stdout).match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) / 1024 : NaN;
}

/** Samples a process's RSS every 200 ms; `max` is the highest seen. */
export function rssSampler(pid: number): { readonly max: number; stop(): Promise<void> } {
  let max = NaN;
  let running = true;
  const loop = (async () => {
    while (running) {
      const rss = await rssMib(pid);
      if (Number.isNaN(max) || rss > max) max = rss;
      await new Promise((r) => setTimeout(r, 200));
    }
  })();
  return {
    get max() {
      return max;
    },
    async stop() {
      running = false;
      await loop;
    },
  };
}
