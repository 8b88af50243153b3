// Public surface of the conformance harness, for every suite that drives a provider.
export * from "./types.ts";
export * from "./client.ts";
export * from "./process.ts";
export * from "./harness.ts";
export * from "./assert.ts";
export * from "./rand.ts";
export * from "./teardown.ts";
export * from "./time.ts";
export * from "./tools.ts";
