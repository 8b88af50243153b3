// Shard identity under mTLS (docs/security.md#shard-identity-under-mtls): a shard's
// client certificate carries the URI SAN `bigfleet://shard/<shard_id>`. When a
// verified certificate names shards this way, a mutating request may only
// carry one of those shard ids: a shard cannot fence or actuate machines in
// another shard's name. Certificates without such a SAN, plain TLS and
// plaintext are not restricted; reads never are.

import type { PeerCertificate } from "node:tls";
import { Code, KitError } from "../kit/errors.ts";

export const SHARD_URI_PREFIX = "bigfleet://shard/";

/** What a grpc-js server call exposes about its transport (grpc-js ≥ 1.10). */
export interface AuthSource {
  getAuthContext?: () => { sslPeerCertificate?: PeerCertificate };
}

/** Shard ids the verified peer certificate speaks for; null = unrestricted. */
export function peerShardIds(call: AuthSource): string[] | null {
  const cert = call.getAuthContext?.().sslPeerCertificate;
  const sans = cert?.subjectaltname;
  if (!sans) return null;
  const ids = parseSubjectAltNames(sans)
    .filter((e) => e.startsWith("URI:" + SHARD_URI_PREFIX))
    .map((e) => e.slice(4 + SHARD_URI_PREFIX.length));
  return ids.length > 0 ? ids : null;
}

/** Throws PERMISSION_DENIED when a restricted peer stamps another shard's id. */
export function assertShardAllowed(allowed: string[] | null, shardId: string): void {
  if (allowed === null) return;
  if (allowed.some((id) => id === shardId || safeDecode(id) === shardId)) return;
  throw new KitError(
    Code.PermissionDenied,
    `client certificate identifies shard ${JSON.stringify(allowed[0])}; ` +
      `request carries shard_id ${JSON.stringify(shardId)}`,
  );
}

/**
 * Splits node:tls's `subjectaltname` ("DNS:a, URI:b") into entries. Node
 * writes a value with separators or quotes as a JSON string (`URI:"a, b"`),
 * so a comma inside a name cannot forge a second entry.
 */
export function parseSubjectAltNames(text: string): string[] {
  const out: string[] = [];
  let i = 0;
  while (i < text.length) {
    const colon = text.indexOf(":", i);
    if (colon < 0) break;
    const type = text.slice(i, colon);
    let value: string;
    let next: number;
    if (text[colon + 1] === '"') {
      let j = colon + 2;
      while (j < text.length && text[j] !== '"') j += text[j] === "\\" ? 2 : 1;
      try {
        value = JSON.parse(text.slice(colon + 1, j + 1));
      } catch {
        value = text.slice(colon + 2, j);
      }
      next = text.indexOf(", ", j);
    } else {
      next = text.indexOf(", ", colon);
      value = text.slice(colon + 1, next < 0 ? text.length : next);
    }
    out.push(`${type}:${value}`);
    if (next < 0) break;
    i = next + 2;
  }
  return out;
}

function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
