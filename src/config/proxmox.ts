// Real-backend settings: API URL, token, nodes and TLS trust for the API.
// The token secret never appears in any message.

import { quote } from "./errors.ts";
import { checkSegment } from "./segment.ts";
import type { VmidRange } from "./types.ts";

/** `USER@REALM!TOKENID`, e.g. `bigfleet@pve!autoscaler`. */
const TOKEN_ID = /^[^\s@!]+@[^\s@!]+![^\s@!]+$/;

/** Check the API URL: https only (there is no insecure mode). Throws Error. */
export function checkApiUrl(text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new Error(`not a URL: ${quote(text)}`);
  }
  if (url.protocol !== "https:") {
    throw new Error(`must be an https:// URL, got ${quote(url.protocol)}`);
  }
  if (url.hostname === "") throw new Error("URL has no host");
  // Credentials belong in the token flags, never in a URL that gets logged.
  if (url.username !== "" || url.password !== "") {
    throw new Error("URL must not contain credentials");
  }
  return text.replace(/\/+$/, "");
}

/** Check a token id shape. Throws Error. */
export function checkTokenId(text: string): string {
  if (!TOKEN_ID.test(text)) {
    throw new Error(`want USER@REALM!TOKENID (e.g. bigfleet@pve!autoscaler), got ${quote(text)}`);
  }
  return text;
}

/** Trim the trailing newline a secret file usually has; reject unusable secrets without echoing them. */
export function cleanSecret(raw: string): string {
  const secret = raw.replace(/[\r\n]+$/, "");
  if (secret.trim() === "") throw new Error("token secret is empty");
  if (/\s/.test(secret) || [...secret].some(isControl)) {
    throw new Error("token secret contains whitespace or control characters");
  }
  return secret;
}

/** One token of a token file: its id (null for a bare secret: --proxmox-token-id's) and secret. */
export interface TokenLine {
  tokenId: string | null;
  secret: string;
}

/** What a token file holds: the token to use, and the tokens retiring after a rotation. */
export interface TokenFile extends TokenLine {
  /**
   * The lines after the first: tokens a rotation is retiring, used only to
   * read the tasks they started (docs/credentials.md#rotating-the-token).
   */
  retiring: TokenLine[];
}

/**
 * A token file: one token per line, the secret alone or
 * `USER@REALM!TOKENID=SECRET` (the form a rotation writes, so a new token id
 * arrives with its secret). The first line is the token to use; the others
 * are retiring tokens (docs/credentials.md#rotating-the-token). Empty lines
 * are ignored. Throws Error without echoing a secret.
 */
export function parseTokenFile(raw: string): TokenFile {
  const lines = raw.split("\n").map((l) => l.replace(/\r$/, "")).filter((l) => l.trim() !== "");
  if (lines.length === 0) throw new Error("token secret is empty");
  const tokens = lines.map((line, i) => {
    try {
      return parseTokenLine(line);
    } catch (e) {
      throw new Error(
        lines.length === 1 ? (e as Error).message : `line ${i + 1}: ${(e as Error).message}`,
      );
    }
  });
  const seen = new Set<string | null>();
  for (const t of tokens) {
    if (seen.has(t.tokenId)) {
      throw new Error(
        t.tokenId === null
          ? "more than one line holds a secret alone (only one token may go without its id)"
          : `token ${t.tokenId} is listed twice`,
      );
    }
    seen.add(t.tokenId);
  }
  return { ...tokens[0], retiring: tokens.slice(1) };
}

/** One line of a token file: SECRET or ID=SECRET. Throws Error without echoing it. */
function parseTokenLine(line: string): TokenLine {
  const text = cleanSecret(line);
  const eq = text.lastIndexOf("=");
  // PVE secrets are UUIDs: an "=" can only separate an id from its secret.
  if (eq < 0) return { tokenId: null, secret: text };
  const tokenId = text.slice(0, eq);
  if (!TOKEN_ID.test(tokenId)) {
    throw new Error("holds an '=' but no USER@REALM!TOKENID before it (want SECRET or ID=SECRET)");
  }
  return { tokenId, secret: cleanSecret(text.slice(eq + 1)) };
}

/** Parse `--nodes`: comma list, non-empty names, no `/`, no duplicates. Throws Error. */
export function parseNodes(text: string): string[] {
  const nodes = text.split(",").map((n) => n.trim());
  const seen = new Set<string>();
  for (const node of nodes) {
    if (node === "") throw new Error(`empty node name in ${quote(text)}`);
    // Each node is a zone: a segment of machine ids.
    checkSegment(node, "node name");
    if (seen.has(node)) throw new Error(`node ${quote(node)} listed twice`);
    seen.add(node);
  }
  return nodes;
}

/** What `--proxmox-tags` writes for a VM's own per-machine tag. */
export const MACHINE_TAG_TOKEN = "@machine";

/**
 * Parse `--proxmox-tags`: a comma list of Proxmox tags (lower-case, as PVE
 * stores them: `[a-z0-9_][a-z0-9_+.-]*`) and `@machine`; empty means none.
 * Throws Error.
 */
export function parseVmTags(text: string): string[] {
  if (text.trim() === "") return [];
  const out: string[] = [];
  for (const raw of text.split(",")) {
    const tag = raw.trim();
    if (tag !== MACHINE_TAG_TOKEN && !/^[a-z0-9_][a-z0-9_+.-]*$/.test(tag)) {
      throw new Error(
        `${quote(tag)} is not a Proxmox tag (lower-case letters, digits and _ + . -, not ` +
          `starting with + . -) nor ${MACHINE_TAG_TOKEN}`,
      );
    }
    if (!out.includes(tag)) out.push(tag);
  }
  return out;
}

/** A bound of the load the provider puts on the cluster: 0 (no bound) to `max`. Throws Error. */
export function parseBound(text: string, max: number): number {
  const t = text.trim();
  if (!/^\d+$/.test(t) || Number(t) > max) {
    throw new Error(`want a whole number from 0 (no limit) to ${max}, got ${quote(text)}`);
  }
  return Number(t);
}

/**
 * `--proxmox-vmid-range FIRST-LAST` (both included, each a VMID
 * 100-999999999) as a range with `upper` exclusive, like datacenter.cfg's
 * next-id. Throws Error.
 */
export function parseVmidRange(text: string): VmidRange {
  const m = /^\s*(\d+)\s*-\s*(\d+)\s*$/.exec(text);
  if (m === null) throw new Error(`want FIRST-LAST (e.g. 20000-29999), got ${quote(text)}`);
  const [first, last] = [Number(m[1]), Number(m[2])];
  for (const n of [first, last]) {
    if (n < 100 || n > 999_999_999) throw new Error(`${n} is not a VMID (100-999999999)`);
  }
  if (first > last) throw new Error(`${first} is above ${last}: want FIRST-LAST, lowest first`);
  return { lower: first, upper: last + 1 };
}

/** Normalise a SHA-256 fingerprint (`ab:cd:...` or 64 bare hex) to `AB:CD:...`. Throws Error. */
export function normaliseFingerprint(text: string): string {
  const t = text.trim();
  const hex = /^[0-9a-fA-F]{64}$/.test(t)
    ? t
    : /^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){31}$/.test(t)
    ? t.replaceAll(":", "")
    : null;
  if (hex === null) {
    throw new Error(
      `want a SHA-256 fingerprint as AB:CD:... (32 bytes) or 64 hex digits, got ${quote(t)}`,
    );
  }
  return hex.toUpperCase().match(/../g)!.join(":");
}

function isControl(c: string): boolean {
  const code = c.charCodeAt(0);
  return code < 0x20 || code === 0x7f;
}
