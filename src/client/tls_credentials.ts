// TLS channel credentials for grpc-js that also work for an IP target.
//
// grpc-js's own TLS credentials always send the target's host as the TLS
// server name (SNI), and Deno's node:tls refuses an IP address there
// ("options.servername must not be an IP address", as RFC 6066 forbids it),
// so `--target 10.0.0.5:9000 --tls-ca ca.pem` could never connect. These
// credentials make the same verified connection themselves: SNI only for a
// DNS name, and the certificate checked against the name to check (its IP
// SAN for an IP) — --tls-server-name when given, else the target's host.

import * as grpc from "@grpc/grpc-js";
import { isIP, type Socket } from "node:net";
import tls from "node:tls";

export interface ClientTlsMaterial {
  /** PEM CA bundle; null: the runtime's default roots. */
  ca: string | null;
  /** PEM client key and certificate for mTLS (both or neither). */
  key: string | null;
  cert: string | null;
  /** The name (or IP) the server certificate must carry; "" means the target's host. */
  serverName: string;
}

/** grpc-js's connector seam (SecureConnector), as much of it as a TLS dial needs. */
interface Connector {
  connect(socket: Socket): Promise<{ socket: Socket; secure: boolean }>;
  waitForReady(): Promise<void>;
  getCallCredentials(): grpc.CallCredentials;
  destroy(): void;
}

/** The host of a `host:port` / `[v6]:port` dial target (grpc-js hands it over as the URI path). */
export function targetHost(path: string): string {
  const v6 = /^\[([^\]]+)\](?::\d+)?$/.exec(path);
  if (v6) return v6[1];
  const colon = path.lastIndexOf(":");
  return colon > 0 && path.indexOf(":") === colon ? path.slice(0, colon) : path;
}

class ClientTls extends grpc.ChannelCredentials {
  constructor(
    private readonly material: ClientTlsMaterial,
    private readonly callCredentials: grpc.CallCredentials = grpc.CallCredentials.createEmpty(),
  ) {
    super();
  }

  override compose(call: grpc.CallCredentials): grpc.ChannelCredentials {
    return new ClientTls(this.material, this.callCredentials.compose(call));
  }

  _isSecure(): boolean {
    return true;
  }

  _equals(other: grpc.ChannelCredentials): boolean {
    return other === this;
  }

  _createSecureConnector(
    target: { path: string },
    _options: grpc.ChannelOptions,
    callCredentials?: grpc.CallCredentials,
  ): Connector {
    const { ca, key, cert, serverName } = this.material;
    const name = serverName !== "" ? serverName : targetHost(target.path);
    const call = callCredentials
      ? this.callCredentials.compose(callCredentials)
      : this.callCredentials;
    return {
      connect: (socket) =>
        new Promise((resolve, reject) => {
          const secure = tls.connect({
            socket,
            // An IP goes in as the host to verify, a name as SNI (which is verified too).
            ...(isIP(name) ? { host: name } : { servername: name }),
            ALPNProtocols: ["h2"],
            ca: ca ?? undefined,
            key: key ?? undefined,
            cert: cert ?? undefined,
            checkServerIdentity: (_host, peer) => tls.checkServerIdentity(name, peer),
          }, () => {
            if (secure.authorized) resolve({ socket: secure, secure: true });
            else reject(secure.authorizationError ?? new Error("server certificate not trusted"));
          });
          secure.once("error", reject);
        }),
      waitForReady: () => Promise.resolve(),
      getCallCredentials: () => call,
      destroy() {},
    };
  }
}

/** TLS (mTLS with key and cert) credentials verifying the server as ClientTlsMaterial says. */
export function clientTls(material: ClientTlsMaterial): grpc.ChannelCredentials {
  return new ClientTls(material);
}
