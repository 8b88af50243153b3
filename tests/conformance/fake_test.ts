// The conformance suite against the in-memory fake backend, booted exactly as
// the certification runner boots a provider (seed 256), then once more with
// every fake transition taking 50 ms so the checks on transitional states
// (traces, CONFIGURING snapshots, burst acks) observe something real.

import { fakeProviderArgs, startProvider } from "../harness/mod.ts";
import { defineConformanceSuite } from "./suite.ts";

defineConformanceSuite("fake", () => startProvider({ args: fakeProviderArgs({ seed: 256 }) }));

defineConformanceSuite(
  "fake-delay-50ms",
  () => startProvider({ args: fakeProviderArgs({ seed: 256, fakeDelay: "50ms" }) }),
);
