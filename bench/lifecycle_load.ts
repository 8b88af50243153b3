// Lifecycle load for the fleet benchmarks: clients each driving their own
// machine through Create, Configure, Drain and Delete as fast as acks come back.

import { sleep } from "../tests/harness/mod.ts";
import { RawClient, readAck } from "../tests/harness/raw_client.ts";
import type { BenchToken } from "../tests/harness/raw_client.ts";

/**
 * One machine driven round its lifecycle (Create, Configure, Drain, Delete)
 * as fast as the provider accepts. With the instant fake a transition lands
 * right after its ack; a call that still finds the previous transition
 * running is retried (and counted) rather than pre-empted by polling.
 */
async function lifecycleWorker(
  c: RawClient,
  id: string,
  shard: string,
  until: number,
  shared: { transitions: number },
  limit: number,
): Promise<{ transitions: number; retries: number }> {
  const t: BenchToken = { shard, epoch: 1, seq: 0 };
  const steps = [
    () => c.create(id, t),
    () => c.configure(id, "bench-cluster", t),
    () => c.drain(id, t),
    () => c.delete(id, t),
  ];
  let transitions = 0;
  let retries = 0;
  let step = 0;
  while (performance.now() < until && shared.transitions < limit) {
    t.seq++;
    try {
      readAck(await steps[step]());
      transitions++;
      shared.transitions++;
      step = (step + 1) % steps.length;
    } catch (e) {
      if (!/cannot|state/.test(String(e))) throw e;
      retries++;
      await sleep(1);
    }
  }
  return { transitions, retries };
}

/**
 * 16 (or `ids.length`) clients, each cycling its own machine, for `ms` or
 * until `limit` transitions in all.
 */
export async function lifecycleLoad(
  addr: string,
  ids: string[],
  ms: number,
  limit = Infinity,
): Promise<{ transitions: number; retries: number; seconds: number }> {
  const clients = ids.map(() => new RawClient(addr));
  const t0 = performance.now();
  const until = t0 + ms;
  const shared = { transitions: 0 };
  const runs = await Promise.all(
    ids.map((id, i) => lifecycleWorker(clients[i], id, `bench-shard-${i}`, until, shared, limit)),
  );
  const seconds = (performance.now() - t0) / 1000;
  for (const c of clients) c.close();
  return {
    transitions: runs.reduce((s, r) => s + r.transitions, 0),
    retries: runs.reduce((s, r) => s + r.retries, 0),
    seconds,
  };
}
