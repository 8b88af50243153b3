// Where the API token comes from for each request. With --proxmox-token-file
// the file is looked at again when it may have changed: at most once a second
// on use (a stat: Kubernetes replaces a projected Secret's file by a symlink
// swap, which gives it a new inode and mtime), and at once after a 401, so a
// rotated token is picked up without a restart and a call that met a token
// retired under it is retried once with the new one
// (docs/credentials.md#rotating-the-token). The secret is never logged.

import { getLogger } from "@logtape/logtape";
import { parseTokenFile } from "../../config/proxmox.ts";

export interface TokenSource {
  /** The Authorization header value for the next request. */
  authorization(): string;
  /**
   * After a 401 answered a request sent with `sent`: read the source again
   * now; true when the header to send differs (one retry is worth it).
   */
  renewedAfter401(sent: string): boolean;
}

export interface FileTokenOptions {
  path: string;
  /** The token read at startup; used until the file holds another valid one. */
  tokenId: string;
  secret: string;
  /** The token id to use when the file holds only a secret (--proxmox-token-id). */
  defaultId?: string;
  /** Least time between two looks at the file on use; default 1 s. */
  checkEveryMs?: number;
}

const log = getLogger(["bigfleet", "proxmox"]);

export function headerFor(tokenId: string, secret: string): string {
  return `PVEAPIToken=${tokenId}=${secret}`;
}

/** A token that never changes (an inline secret, or tests). */
export function fixedToken(tokenId: string, secret: string): TokenSource {
  const header = headerFor(tokenId, secret);
  return { authorization: () => header, renewedAfter401: () => false };
}

/** The token in a file, followed as the file changes. */
export function fileToken(o: FileTokenOptions): TokenSource {
  const every = o.checkEveryMs ?? 1000;
  const defaultId = o.defaultId ?? o.tokenId;
  let tokenId = o.tokenId;
  let header = headerFor(o.tokenId, o.secret);
  let seen = stamp();
  let lastLook = Date.now();
  /** The last problem logged, so a broken file is reported once, not per request. */
  let complaint = "";

  /** What identifies the file's current version, "" when it cannot be read. */
  function stamp(): string {
    try {
      const st = Deno.statSync(o.path);
      return `${st.ino}:${st.size}:${st.mtime?.getTime()}`;
    } catch {
      return "";
    }
  }

  /** Read the file; true when the header changed. A bad file keeps the token in use. */
  function reload(): boolean {
    let next: string;
    let nextId: string;
    try {
      const parsed = parseTokenFile(Deno.readTextFileSync(o.path));
      nextId = parsed.tokenId ?? defaultId;
      next = headerFor(nextId, parsed.secret);
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e);
      if (why !== complaint) {
        complaint = why;
        log.warn("token file {path} cannot be used ({error}); keeping token {tokenId}", {
          path: o.path,
          error: why,
          tokenId,
        });
      }
      return false;
    }
    complaint = "";
    if (next === header) return false;
    log.info("token file {path} changed: now using token {tokenId}", {
      path: o.path,
      tokenId: nextId,
      was: tokenId,
    });
    header = next;
    tokenId = nextId;
    return true;
  }

  return {
    authorization() {
      const now = Date.now();
      if (now - lastLook >= every) {
        lastLook = now;
        const s = stamp();
        if (s !== seen) {
          seen = s;
          reload();
        }
      }
      return header;
    },
    renewedAfter401(sent) {
      lastLook = Date.now();
      seen = stamp();
      reload();
      return header !== sent;
    },
  };
}
