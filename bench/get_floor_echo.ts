// The smallest gRPC server this stack allows, for bench/get_floor.ts: grpc-js
// on Deno answering CapacityProvider/Get with fixed bytes (a real Machine
// encoding the bench passes in, base64), no kit, no observer, no interceptors.
// Its latency is the floor under the provider's own Get.
//
//   deno run --allow-net --allow-env bench/get_floor_echo.ts <port> <answer base64>

import * as grpc from "@grpc/grpc-js";
import { Buffer } from "node:buffer";

const [port, answer] = Deno.args;
const bytes = Buffer.from(answer, "base64");
const same = (b: Buffer) => b;
const server = new grpc.Server();
server.addService({
  Get: {
    path: "/bigfleet.v1alpha1.CapacityProvider/Get",
    requestStream: false,
    responseStream: false,
    requestDeserialize: same,
    requestSerialize: same,
    responseSerialize: same,
    responseDeserialize: same,
  },
}, { Get: (_call: unknown, done: grpc.sendUnaryData<Buffer>) => done(null, bytes) });
server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (e) => {
  if (e) throw e;
  console.log("ready");
});
