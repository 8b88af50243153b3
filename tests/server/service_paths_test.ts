// The CapacityProvider is served at paths built from the method names, not
// from the parsed .proto (src/server/grpc.ts): they must be exactly the
// paths protoc-generated clients call, for every rpc the contract declares.

import assert from "node:assert/strict";
import * as protoLoader from "@grpc/proto-loader";
import { PROTO_PATH } from "../../src/proto.ts";
import { methodPath, METHODS, SERVICE } from "../../src/server/grpc.ts";

Deno.test("service paths: one per rpc of provider.proto, as the contract names them", () => {
  const def = protoLoader.loadSync(PROTO_PATH, { keepCase: true });
  const service = def[SERVICE] as protoLoader.ServiceDefinition;
  assert.deepEqual([...METHODS], Object.keys(service));
  for (const method of METHODS) {
    const rpc = service[method];
    assert.equal(methodPath(method), rpc.path, method);
    assert.equal(rpc.requestStream, false, method);
    assert.equal(rpc.responseStream, false, method);
  }
});
