// Channel credentials that read the provider through the HTTP/2 frame guard
// (src/server/guarded_stream.ts, its GOAWAY filter src/server/goaway_filter.ts).
//
// A provider that stops gracefully says GOAWAY on every connection, and a
// Deno grpc-js client reading that frame is hit by the node:http2 defect the
// server's guard exists for (docs/security.md#the-http2-frame-guard): the
// session is freed inside nghttp2's GOAWAY handling and `machines watch`
// died with SIGSEGV or SIGABRT instead of reporting the lost provider. With
// the frame removed, the client learns the same from the TCP close that
// follows the provider's last answer: the call in flight ends UNAVAILABLE and
// the command reports it.

import * as grpc from "@grpc/grpc-js";
import type { Socket } from "node:net";
import { GuardedStream } from "../server/guarded_stream.ts";

class GoawayFiltered extends grpc.ChannelCredentials {
  constructor(private readonly inner: grpc.ChannelCredentials) {
    super();
  }

  override compose(call: grpc.CallCredentials): grpc.ChannelCredentials {
    return new GoawayFiltered(this.inner.compose(call));
  }

  _isSecure(): boolean {
    return this.inner._isSecure();
  }

  _equals(other: grpc.ChannelCredentials): boolean {
    return other === this;
  }

  _createSecureConnector(
    ...args: Parameters<grpc.ChannelCredentials["_createSecureConnector"]>
  ): ReturnType<grpc.ChannelCredentials["_createSecureConnector"]> {
    const inner = this.inner._createSecureConnector(...args);
    return {
      connect: async (socket: Socket) => {
        const r = await inner.connect(socket);
        // http2.connect takes any duplex as its connection; grpc-js only
        // listens on it and reads its addresses, which GuardedStream forwards.
        return { ...r, socket: new GuardedStream(r.socket) as unknown as Socket };
      },
      waitForReady: () => inner.waitForReady(),
      getCallCredentials: () => inner.getCallCredentials(),
      destroy: () => inner.destroy(),
    };
  }
}

/** `credentials`, with every GOAWAY the server sends removed before node:http2 reads it. */
export function withGoawayFilter(credentials: grpc.ChannelCredentials): grpc.ChannelCredentials {
  return new GoawayFiltered(credentials);
}
