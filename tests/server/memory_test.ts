// Memory follows the work in flight, not the history: a provider serving full
// Lists of a large fleet one after another must level off, not grow by a
// List's worth per call (Deno's node:http2 kept each large response's bytes
// until the stream object was collected; docs/performance.md). Figures are
// compared within one run, as ratios of the List size, never as absolute
// times or sizes.

import assert from "node:assert/strict";
import { fakeProviderArgs, startProvider } from "../harness/mod.ts";
import { MIB, peakRssBytes, resetPeak, rssBytes } from "../harness/proc_status.ts";
import { RawClient } from "../harness/raw_client.ts";

const FLEET = 20_000;
const WARM_LISTS = 20;
const MORE_LISTS = 100;

Deno.test({
  name: "memory: peak RSS of 120 full Lists levels off within a few Lists' worth",
  ignore: Deno.build.os !== "linux",
  async fn() {
    const p = await startProvider({
      args: fakeProviderArgs({ seed: FLEET }),
      readyTimeoutMs: 60_000,
    });
    const c = new RawClient(p.addr);
    try {
      const listBytes = (await c.list()).length;
      const idle = rssBytes(p.pid);
      resetPeak(p.pid);
      for (let i = 0; i < WARM_LISTS; i++) await c.list();
      const warm = peakRssBytes(p.pid);
      for (let i = 0; i < MORE_LISTS; i++) await c.list();
      const after = peakRssBytes(p.pid);
      const lists = (bytes: number) => (bytes / listBytes).toFixed(1);
      const report =
        `List ${(listBytes / MIB).toFixed(1)} MiB; idle ${(idle / MIB).toFixed(0)} MiB, ` +
        `peak after ${WARM_LISTS} Lists +${lists(warm - idle)} Lists' worth, ` +
        `after ${WARM_LISTS + MORE_LISTS} +${lists(after - idle)}`;
      console.log(report);
      // A provider that keeps a List's worth per call adds ~100 here; a few at most are slack.
      assert.ok(after - warm <= 20 * listBytes, report);
      // And the whole run stays within a bounded multiple of one response above idle.
      assert.ok(after - idle <= 40 * listBytes, report);
    } finally {
      c.close();
      await p.stop();
    }
  },
});
