// Where the CapacityProvider contract's proto file is, for the two that read
// it: the server's reflection (src/server/grpc.ts) and the CLI's client
// (src/client/wire.ts). `deno compile --include proto/` bundles it.

import { fileURLToPath } from "node:url";

export const PROTO_PATH = fileURLToPath(
  new URL("../proto/bigfleet/v1alpha1/provider.proto", import.meta.url),
);
