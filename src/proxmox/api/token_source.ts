// Where the API token comes from for each request, and which tokens this
// process knows. With --proxmox-token-file the file is looked at again when
// it may have changed: at most once a second on use (a stat: Kubernetes
// replaces a projected Secret's file by a symlink swap, which gives it a new
// inode and mtime), and at once after a 401, so a rotated token is picked up
// without a restart and a call that met a token retired under it is retried
// once with the new one (docs/credentials.md#rotating-the-token).
//
// A token sees only the tasks it started (docs/proxmox-notes.md "Worker
// tasks"), so every token this process used, and the retiring ones the file
// lists after the first line, stay known (in memory only) to read their own
// tasks, until Proxmox refuses one (it was removed). The secrets are never
// logged.

import { getLogger } from "@logtape/logtape";
import { parseTokenFile } from "../../config/proxmox.ts";

export interface TokenSource {
  /** The Authorization header value for the next request: the token in use. */
  authorization(): string;
  /** The header of token `id` when this process knows its secret (in use or retiring), else null. */
  authorizationOf(id: string): string | null;
  /**
   * A 401 answered a request sent with `sent`: a retiring token is forgotten
   * (it was removed); for the token in use the source is read again now.
   * The caller then picks its header again (one retry is worth it when it changed).
   */
  refused(sent: string): void;
  /** The ids of the tokens known: the one in use first, then the retiring ones. */
  ids(): string[];
  /** A task of token `id` is followed until the returned function is called. */
  follow(id: string): () => void;
  /**
   * Calls `fn(id)` whenever a retiring token has no followed task left, and
   * at once for each retiring token that has none now.
   */
  onIdle(fn: (id: string) => void): void;
}

export interface FileTokenOptions {
  path: string;
  /** The token read at startup; used until the file holds another valid one. */
  tokenId: string;
  secret: string;
  /** The token id of a secret alone in the file (--proxmox-token-id). */
  defaultId?: string;
  /** Least time between two looks at the file on use; default 1 s. */
  checkEveryMs?: number;
}

const log = getLogger(["bigfleet", "proxmox"]);

export function headerFor(tokenId: string, secret: string): string {
  return `PVEAPIToken=${tokenId}=${secret}`;
}

interface Known {
  header: string;
  /** Tasks of this token being followed now. */
  following: number;
}

/** The tokens known and the one in use: the state behind both kinds of source. */
class Roster {
  #current: string;
  readonly #known = new Map<string, Known>();
  readonly #idle: ((id: string) => void)[] = [];

  constructor(tokenId: string, header: string) {
    this.#current = tokenId;
    this.#known.set(tokenId, { header, following: 0 });
  }

  get current(): string {
    return this.#current;
  }

  header(id = this.#current): string | null {
    return this.#known.get(id)?.header ?? null;
  }

  ids(): string[] {
    return [this.#current, ...[...this.#known.keys()].filter((id) => id !== this.#current)];
  }

  /** Make `id` the token in use; the one in use before retires (unless it is the same id). */
  use(id: string, header: string): void {
    const had = this.#known.get(id);
    this.#known.set(id, { header, following: had?.following ?? 0 });
    const before = this.#current;
    this.#current = id;
    if (before !== id) this.#idleCheck(before);
  }

  /** A retiring token the file lists; a token in use is never demoted by it. */
  retiring(id: string, header: string): void {
    if (id === this.#current) return;
    const had = this.#known.get(id);
    this.#known.set(id, { header, following: had?.following ?? 0 });
    if (had === undefined) this.#idleCheck(id);
  }

  /** Forget retiring token `id` (Proxmox refused it: it was removed). */
  forget(id: string): void {
    if (id !== this.#current) this.#known.delete(id);
  }

  /** The known token whose header is `header`, if any. */
  idOf(header: string): string | undefined {
    for (const [id, k] of this.#known) if (k.header === header) return id;
    return undefined;
  }

  follow(id: string): () => void {
    const k = this.#known.get(id);
    if (k === undefined) return () => {};
    k.following++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      k.following--;
      if (this.#known.get(id) === k) this.#idleCheck(id);
    };
  }

  onIdle(fn: (id: string) => void): void {
    this.#idle.push(fn);
    for (const id of this.ids().slice(1)) if (this.#known.get(id)!.following === 0) fn(id);
  }

  #idleCheck(id: string): void {
    const k = this.#known.get(id);
    if (id === this.#current || k === undefined || k.following > 0) return;
    for (const fn of this.#idle) {
      try {
        fn(id);
      } catch {
        // A listener's failure must not break a request.
      }
    }
  }
}

/** The TokenSource face of a roster, with `reload` run before each use and after a 401. */
function sourceOf(roster: Roster, reload: (force: boolean) => void): TokenSource {
  return {
    authorization() {
      reload(false);
      return roster.header()!;
    },
    authorizationOf: (id) => roster.header(id),
    refused(sent) {
      const id = roster.idOf(sent);
      if (id !== undefined && id !== roster.current) return roster.forget(id);
      reload(true);
    },
    ids: () => roster.ids(),
    follow: (id) => roster.follow(id),
    onIdle: (fn) => roster.onIdle(fn),
  };
}

/** A token that never changes (an inline secret, or tests). */
export function fixedToken(tokenId: string, secret: string): TokenSource {
  return sourceOf(new Roster(tokenId, headerFor(tokenId, secret)), () => {});
}

/** The tokens in a file, followed as the file changes. */
export function fileToken(o: FileTokenOptions): TokenSource {
  const every = o.checkEveryMs ?? 1000;
  const defaultId = o.defaultId ?? o.tokenId;
  const roster = new Roster(o.tokenId, headerFor(o.tokenId, o.secret));
  let seen = "";
  let lastLook = 0;
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

  /** Read the file; a bad file keeps the tokens known. */
  function read(): void {
    let tokens: { id: string; header: string }[];
    try {
      const parsed = parseTokenFile(Deno.readTextFileSync(o.path));
      tokens = [parsed, ...parsed.retiring].map((t) => ({
        id: t.tokenId ?? defaultId,
        header: headerFor(t.tokenId ?? defaultId, t.secret),
      }));
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e);
      if (why !== complaint) {
        complaint = why;
        log.warn("token file {path} cannot be used ({error}); keeping token {tokenId}", {
          path: o.path,
          error: why,
          tokenId: roster.current,
        });
      }
      return;
    }
    complaint = "";
    const [first, ...rest] = tokens;
    const was = roster.current;
    const changed = roster.header() !== first.header;
    // The token in use before is known from here on as retiring (unless it was only re-keyed).
    if (changed) roster.use(first.id, first.header);
    for (const t of rest) roster.retiring(t.id, t.header);
    if (!changed) return;
    log.info("token file {path} changed: now using token {tokenId}", {
      path: o.path,
      tokenId: first.id,
      was,
      retiring: roster.ids().slice(1).join(","),
    });
  }

  function reload(force: boolean): void {
    const now = Date.now();
    if (!force && now - lastLook < every) return;
    lastLook = now;
    const s = stamp();
    if (!force && s === seen) return;
    seen = s;
    read();
  }

  // The retiring lines the file holds now (the first is what the config loaded).
  reload(true);
  return sourceOf(roster, reload);
}
