// The conformance suite against the in-memory fake backend, booted exactly as
// the certification runner boots a provider (seed 256).

import { fakeProviderArgs, startProvider } from "../harness/mod.ts";
import { defineConformanceSuite } from "./suite.ts";

defineConformanceSuite("fake", () => startProvider({ args: fakeProviderArgs({ seed: 256 }) }));
