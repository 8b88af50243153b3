// Hostile peers and overload against a real provider process (limits:
// docs/security.md#listener-limits): 1,000 idle TCP connections, slow-loris
// prefaces, a request declaring 5 MiB that stalls, a client opening 10,000
// streams without reading a byte, and one asking for Lists it never reads.
// Meanwhile an honest client's Gets must all succeed and stay as fast as
// the same Gets against an identical provider with no hostile traffic,
// measured alternately in the same run (absolute figures: bench/hostile.ts),
// and the provider's memory must stay bounded.

import assert from "node:assert/strict";
import { fakeProviderArgs, ProviderClient, startProvider } from "../harness/mod.ts";
import { waitFor } from "./helpers.ts";
import {
  alternateGets,
  honestClient,
  type HostileMix,
  percentile,
  rssMib,
  rssSampler,
  startHostileMix,
} from "./overload_scenario.ts";
import { LISTENER_LIMITS } from "../../src/server/limits.ts";

/** A few hundred machines: one List answer is tens of KB. */
const SEED = 300;

Deno.test("overload: hostile peers neither starve an honest client nor grow memory without bound", async () => {
  const args = fakeProviderArgs({ seed: SEED });
  const [target, control] = await Promise.all([startProvider({ args }), startProvider({ args })]);
  const sides = [await honestClient(target), await honestClient(control)];
  let mix: HostileMix | undefined;
  let rss: ReturnType<typeof rssSampler> | undefined;
  try {
    await alternateGets(sides, 50); // warm both up
    for (const s of sides) s.times = [];
    const rssBefore = await rssMib(target.pid);
    assert.ok(Number.isFinite(rssBefore), "the provider's RSS is readable");
    rss = rssSampler(target.pid);
    mix = await startHostileMix(target.port);
    const { idle, loris, getFlood, listFlood } = mix;

    // The connection limit pushed the surplus idle connections out at once.
    const shed = 1_000 - LISTENER_LIMITS.maxConnections;
    await waitFor(
      "surplus idle connections shed",
      () => idle.closedByServer() >= shed || undefined,
    );

    await alternateGets(sides, 300);
    // A new client gets in while the idle connections still fill the table.
    const late = new ProviderClient(target.addr, { deadlineMs: 10_000 });
    assert.equal((await late.list({ max_results: 1 })).machines.length, 1);
    late.close();

    // The Get flood ran its 10,000 streams, or (opening them faster than
    // they are served) had the excess refused and was then disconnected.
    await waitFor(
      "the unread Get flood over",
      () => getFlood.sent() === 10_000 || getFlood.closedByServer() === 1 || undefined,
      30_000,
    );
    // The List reader that never reads is cut at the unread-bytes limit.
    await waitFor("List flood cut", () => listFlood.closedByServer() === 1 || undefined, 30_000);
    assert.ok(listFlood.sent() < 10_000, `${listFlood.sent()} Lists sent before the cut`);
    assert.match(target.stderr(), /response bytes unread; closing its connection/);
    // Silent and trickling connections are closed at the handshake deadline.
    await waitFor("idle connections closed", () => idle.closedByServer() === 1_000 || undefined);
    await waitFor(
      "slow-loris connections closed",
      () => loris.closedByServer() === 20 || undefined,
    );
    await rss.stop();

    await alternateGets(sides, 100);
    const [t, c] = sides.map((s) => s.times.sort((a, b) => a - b));
    const figures =
      `p50 ${percentile(t, 0.5).toFixed(2)} vs ${percentile(c, 0.5).toFixed(2)} ms, ` +
      `p90 ${percentile(t, 0.9).toFixed(2)} vs ${
        percentile(c, 0.9).toFixed(2)
      } ms (hostile vs quiet)`;
    assert.ok(percentile(t, 0.5) <= 3 * percentile(c, 0.5), figures);
    assert.ok(percentile(t, 0.9) <= 5 * percentile(c, 0.9), figures);
    // The List flood alone asked for 10,000 answers of tens of KB each.
    assert.ok(Number.isFinite(rss.max), "the provider's RSS was sampled");
    const growth = rss.max - rssBefore;
    assert.ok(growth < 256, `RSS grew ${growth.toFixed(0)} MiB (${rssBefore.toFixed(0)} before)`);
    assert.equal(target.exitStatus(), undefined, "the provider is still running");
    console.log(`${figures}; RSS +${growth.toFixed(0)} MiB`);
  } finally {
    await rss?.stop();
    mix?.close();
    for (const s of sides) s.client.close();
    await target.stop();
    await control.stop();
  }
});
