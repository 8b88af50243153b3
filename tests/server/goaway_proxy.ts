// A proxy (throttle_proxy.ts, unthrottled) that forwards every byte
// unchanged and counts the GOAWAY frames clients send, so a test can show
// its clients really said goodbye.

import { GoawayFilter } from "../../src/server/goaway_filter.ts";
import { startProxy, type TestProxy } from "./throttle_proxy.ts";

export interface GoawayProxy extends TestProxy {
  /** GOAWAY frames clients sent, over all connections. */
  readonly goaways: number;
}

export function startGoawayProxy(targetPort: number): GoawayProxy {
  // The guard's own parser, used only to count: what it would drop is forwarded.
  const counters = new Map<number, GoawayFilter>();
  const proxy = startProxy(targetPort, {
    onUpstream(connection, bytes) {
      let counter = counters.get(connection);
      if (!counter) counters.set(connection, counter = new GoawayFilter());
      try {
        counter.push(bytes);
      } catch { /* not HTTP/2: nothing to count */ }
    },
  });
  return Object.defineProperty(proxy, "goaways", {
    get: () => [...counters.values()].reduce((n, c) => n + c.goawaysDropped, 0),
  }) as GoawayProxy;
}
