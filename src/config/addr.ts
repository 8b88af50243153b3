// Listen addresses in Go net.SplitHostPort form: ":9000", "127.0.0.1:9000",
// "[::1]:9000", "localhost:0". Host "" means every interface.

import type { ListenAddr } from "./types.ts";

/** Parse `host:port`; throws Error with the problem (the caller names the flag). */
export function parseListenAddr(raw: string): ListenAddr {
  const colon = raw.lastIndexOf(":");
  if (colon < 0) throw new Error(`missing port in address ${JSON.stringify(raw)}`);
  let host = raw.slice(0, colon);
  const portText = raw.slice(colon + 1);
  if (host.startsWith("[")) {
    if (!host.endsWith("]")) throw new Error(`bad bracketed host in ${JSON.stringify(raw)}`);
    host = host.slice(1, -1);
    if (!host.includes(":")) {
      throw new Error(`brackets are only for IPv6 in ${JSON.stringify(raw)}`);
    }
  } else if (host.includes(":")) {
    throw new Error(`IPv6 host must be bracketed, e.g. [::1]:9000, in ${JSON.stringify(raw)}`);
  }
  if (/[\s\[\]\/]/.test(host)) throw new Error(`bad host in address ${JSON.stringify(raw)}`);
  if (!/^\d{1,5}$/.test(portText) || Number(portText) > 65535) {
    throw new Error(`port must be a number 0-65535 in address ${JSON.stringify(raw)}`);
  }
  return { host, port: Number(portText), raw };
}
