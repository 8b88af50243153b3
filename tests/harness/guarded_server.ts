// A grpc-js server of a test (a proxy, a stand-in service) served through the
// provider's own listener, so the client bytes pass the GOAWAY frame guard.
// A test process that serves gRPC is hit by the same Deno node:http2 defect as
// the provider (docs/security.md#the-http2-frame-guard): a client closing its
// channel politely could abort the whole `deno test` run.

import * as grpc from "@grpc/grpc-js";
import { startListener } from "../../src/server/listener.ts";
import { LISTENER_LIMITS } from "../../src/server/limits.ts";

export interface GuardedServer {
  port: number;
  /** Drop every connection and stop listening (the grpc-js server is shut down too). */
  stop(): Promise<void>;
}

export async function serveGuarded(server: grpc.Server): Promise<GuardedServer> {
  const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  const listener = await startListener({
    host: "127.0.0.1",
    port: 0,
    tls: null,
    limits: LISTENER_LIMITS,
    onConnection: (stream) => injector.injectConnection(stream),
  });
  return {
    port: listener.port,
    async stop() {
      server.forceShutdown();
      listener.destroyAll();
      await listener.close();
    },
  };
}
