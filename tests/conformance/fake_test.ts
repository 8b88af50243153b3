// The conformance suite against the in-memory fake backend, booted exactly as
// the certification runner boots a provider (seed 256), then once more with
// every fake transition taking 50 ms so the checks on transitional states
// (traces, CONFIGURING snapshots, burst acks) observe something real.

import { fakeProviderArgs, startProvider } from "../harness/mod.ts";
import { defineConformanceSuite } from "./suite.ts";

// This repository's provider: behaviours that allow a choice assert the one it made.
const own = { harness: { ownProvider: true } };

defineConformanceSuite(
  "fake",
  () => startProvider({ args: fakeProviderArgs({ seed: 256 }) }),
  own,
);

defineConformanceSuite(
  "fake-delay-50ms",
  () => startProvider({ args: fakeProviderArgs({ seed: 256, fakeDelay: "50ms" }) }),
  own,
);
