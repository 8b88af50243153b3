// The wire contract as every harness client decodes it: the product's own
// client loader (src/client/wire.ts), so the harness and `machines` read the
// proto file the same way.

export { capacityProviderCtor, LOADER_OPTIONS } from "../../src/client/wire.ts";
