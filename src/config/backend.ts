// Which backend runs, and the validated Proxmox connection for the real one.
// Fail closed: nothing silently falls back to the in-memory fake.

import type { ProxmoxConfig } from "./types.ts";
import { ConfigError } from "./types.ts";
import type { FlagValues } from "./flags.ts";
import { flagError, forFlag, quote } from "./errors.ts";
import { type ReadFile, readFlagFile, readPem } from "./files.ts";
import { hasCertificate } from "./pem.ts";
import { loadRoomPolicy } from "./room.ts";
import {
  checkApiUrl,
  checkTokenId,
  cleanSecret,
  normaliseFingerprint,
  parseBound,
  parseNodes,
  parseTokenFile,
  parseVmidRange,
  parseVmTags,
  type TokenLine,
} from "./proxmox.ts";

export type BackendKind = "proxmox" | "fake";

/** --use-fake-backend selects the fake (never with an API URL); auto means proxmox when an API URL is set. */
export function chooseBackend(f: FlagValues): BackendKind {
  const mode = f["proxmox-backend"];
  if (mode !== "auto" && mode !== "proxmox" && mode !== "fake") {
    throw flagError("proxmox-backend", `want proxmox, fake or auto, got ${quote(mode)}`);
  }
  if (f["use-fake-backend"] || mode === "fake") {
    // A real cluster's URL with the fake would serve machines that never exist.
    if (f["proxmox-api-url"] !== "") {
      const fake = f["use-fake-backend"] ? "--use-fake-backend" : "--proxmox-backend=fake";
      throw new ConfigError(
        `${fake} conflicts with --proxmox-api-url: the fake backend never talks to Proxmox; ` +
          "drop --proxmox-api-url for a demo, or the fake flag to use the cluster",
      );
    }
    if (mode === "proxmox") {
      throw flagError("use-fake-backend", "conflicts with --proxmox-backend=proxmox; drop one");
    }
    return "fake";
  }
  if (mode === "proxmox" || f["proxmox-api-url"] !== "") return "proxmox";
  throw new ConfigError(
    "no Proxmox API configured: set --proxmox-api-url (with --proxmox-token-id, a token secret, " +
      "--nodes and --proxmox-ca-file or --proxmox-tls-fingerprint) or pass --use-fake-backend " +
      "for the testing-only fake",
  );
}

/** Validate every real-backend setting and read its files. */
export async function loadProxmox(f: FlagValues, readFile: ReadFile): Promise<ProxmoxConfig> {
  const rawUrl = f["proxmox-api-url"];
  if (rawUrl === "") {
    throw flagError(
      "proxmox-api-url",
      "is required for the proxmox backend (e.g. https://pve1:8006/api2/json)",
    );
  }
  const apiUrl = forFlag("proxmox-api-url", () => checkApiUrl(rawUrl));
  const flagId = f["proxmox-token-id"] === ""
    ? null
    : forFlag("proxmox-token-id", () => checkTokenId(f["proxmox-token-id"]));
  const token = await loadToken(f, readFile);
  if (flagId === null && token.tokenId === null) {
    throw flagError(
      "proxmox-token-id",
      "is required for the proxmox backend (or a token file holding USER@REALM!TOKENID=SECRET)",
    );
  }
  // A token file naming its id wins: a rotation brings a new id with its secret.
  const tokenId = token.tokenId ?? flagId!;
  const tokenSecret = token.secret;
  const nodes = forFlag("nodes", () => {
    if (f.nodes.trim() === "") {
      throw new Error("is required for the proxmox backend (comma list of node names)");
    }
    return parseNodes(f.nodes);
  });
  const caFile = f["proxmox-ca-file"];
  const rawFingerprint = f["proxmox-tls-fingerprint"];
  if (caFile === "" && rawFingerprint === "") {
    throw new ConfigError(
      "no TLS trust for the Proxmox API: set --proxmox-ca-file or --proxmox-tls-fingerprint " +
        "(there is no skip-verify option)",
    );
  }
  const caPem = caFile === ""
    ? null
    : await readPem("proxmox-ca-file", caFile, readFile, "CERTIFICATE", hasCertificate);
  const fingerprint = rawFingerprint === ""
    ? null
    : forFlag("proxmox-tls-fingerprint", () => normaliseFingerprint(rawFingerprint));
  return {
    apiUrl,
    tokenId,
    tokenSecret,
    tokenFile: f["proxmox-token-file"] !== "" ? f["proxmox-token-file"] : null,
    caPem,
    fingerprint,
    pool: f["proxmox-pool"].trim(),
    nodes,
    tags: forFlag("proxmox-tags", () => parseVmTags(f["proxmox-tags"])),
    callsPerNode: forFlag(
      "proxmox-calls-per-node",
      () => parseBound(f["proxmox-calls-per-node"], 64),
    ),
    clonesPerStorage: forFlag(
      "proxmox-clones-per-storage",
      () => parseBound(f["proxmox-clones-per-storage"], 64),
    ),
    room: loadRoomPolicy(f, nodes),
    // Set only when given: absent means the datacenter's next-id range alone.
    ...(f["proxmox-vmid-range"] === "" ? {} : {
      vmidRange: forFlag("proxmox-vmid-range", () => parseVmidRange(f["proxmox-vmid-range"])),
    }),
  };
}

// The file wins over the inline flag so the secret can stay out of argv.
async function loadToken(f: FlagValues, readFile: ReadFile): Promise<TokenLine> {
  const file = f["proxmox-token-file"];
  if (file !== "") {
    const raw = await readFlagFile("proxmox-token-file", file, readFile);
    return forFlag("proxmox-token-file", () => parseTokenFile(raw));
  }
  if (f["proxmox-token-secret"] === "") {
    throw new ConfigError(
      "no Proxmox token secret: set --proxmox-token-file (preferred) or --proxmox-token-secret",
    );
  }
  return {
    tokenId: null,
    secret: forFlag("proxmox-token-secret", () => cleanSecret(f["proxmox-token-secret"])),
  };
}
