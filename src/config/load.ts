// loadConfig: argv (+ the files it names) -> a validated Config, or one
// ConfigError line naming the flag and the problem.

import { type Config, ConfigError, type InstanceType, type TemplateSource } from "./types.ts";
import { FLAG_TABLE, type FlagValues, parseFlags } from "./flags.ts";
import { flagError, forFlag, quote } from "./errors.ts";
import { type ReadFile, readFlagFile, readFromDisk } from "./files.ts";
import { parseTimerDuration } from "./duration.ts";
import { parseListenAddr } from "./addr.ts";
import { checkSegment } from "./segment.ts";
import { builtinCatalog, parseCatalog } from "./catalog.ts";
import { storageZones } from "./instance_options.ts";
import {
  describeTemplate,
  namedZones,
  parseTemplateName,
  parseZoneVmids,
  uncoveredOffering,
  vmid,
} from "./templates.ts";
import {
  builtinOfferings,
  expandSlots,
  type Offering,
  parseOfferings,
  zonesOf,
} from "./offerings.ts";
import { parsePrice, parsePrices, type Pricing } from "./pricing.ts";
import { chooseBackend, loadProxmox } from "./backend.ts";
import { loadTls } from "./tls.ts";
import { adminSocketFor, MAX_SOCKET_PATH, STAGING_NAME_BYTES } from "./admin_socket.ts";
import { loadLogging } from "./logging.ts";

export interface LoadEnv {
  /** Test hook; defaults to Deno.readTextFile. */
  readFile?: ReadFile;
}

/** Parse and validate the command line and every file it names. */
export async function loadConfig(argv: string[], env: LoadEnv = {}): Promise<Config> {
  const readFile = env.readFile ?? readFromDisk;
  const f = parseFlags(argv);

  const log = loadLogging({ level: f["log-level"], format: f["log-format"] });
  const addr = forFlag("addr", () => parseListenAddr(f.addr));
  const metricsAddr = f["metrics-addr"] === ""
    ? null
    : forFlag("metrics-addr", () => parseListenAddr(f["metrics-addr"]));
  // The provider is the first segment of every machine id.
  const provider = forFlag("provider", () => checkSegment(f.provider));
  const fakeDelayMs = forFlag("fake-delay", () => parseTimerDuration(f["fake-delay"]));
  const reconcileIntervalMs = forFlag(
    "reconcile-interval",
    () => parseTimerDuration(f["reconcile-interval"]),
  );
  const shutdownTimeoutMs = forFlag(
    "shutdown-timeout",
    () => parseTimerDuration(f["shutdown-timeout"]),
  );
  const adminSocket = forFlag("admin-socket", () => adminSocketPath(f["admin-socket"], f.state));
  const template = defaultTemplate(f["template-vmid"], f["template-name"]);
  const seedCount = forFlag("seed-count", () => {
    const n = parseInteger(f["seed-count"]);
    if (n < 0) throw new Error(`must be >= 0, got ${n}`);
    return n;
  });
  const defaultZone = forFlag("default-zone", () => checkSegment(f["default-zone"]));
  const pricing: Pricing = {
    explicit: forFlag("prices", () => parsePrices(f.prices)),
    perVcpuHour: forFlag("price-per-vcpu-hour", () => parsePrice(f["price-per-vcpu-hour"])),
    perGibHour: forFlag("price-per-gib-hour", () => parsePrice(f["price-per-gib-hour"])),
  };
  const bootstrapPath = f["bootstrap-path"];
  if (bootstrapPath.trim() === "") throw flagError("bootstrap-path", "is empty");
  const bootstrapExec = forFlag("bootstrap-exec", () => parseArgvList(f["bootstrap-exec"]));
  const readyExec = f["ready-exec"] === ""
    ? null
    : forFlag("ready-exec", () => parseArgvList(f["ready-exec"]));
  const readyTimeoutMs = forFlag("ready-timeout", () => parseTimerDuration(f["ready-timeout"]));
  if (!f["ready-gate"] && readyExec !== null) {
    throw flagError("ready-exec", "is set but --ready-gate=false turns the gate off; drop one");
  }

  const backend = chooseBackend(f);
  const proxmox = backend === "proxmox" ? await loadProxmox(f, readFile) : null;

  const catalog = await loadCatalog(f["instance-types"], template, readFile);
  const candidateZones = proxmox ? proxmox.nodes : [`${defaultZone}-a`, `${defaultZone}-b`];
  let offerings: Offering[];
  let zones: string[];
  if (f.offerings === "") {
    offerings = builtinOfferings(catalog, candidateZones, seedCount);
    // The built-in mix lives in the first two zones even when a bucket is empty.
    zones = candidateZones.slice(0, 2);
  } else {
    const text = await readFlagFile("offerings", f.offerings, readFile);
    offerings = forFile(
      "offerings",
      f.offerings,
      () => parseOfferings(text, catalog, proxmox ? proxmox.nodes : null),
    );
    zones = zonesOf(offerings);
  }
  if (proxmox) checkTemplateZones(f, catalog, offerings, proxmox.nodes);
  const warnings: string[] = [];
  if (offerings.every((o) => o.count === 0)) {
    warnings.push(
      f.offerings === ""
        ? "--seed-count=0: the built-in offerings have no slot, so the provider serves 0 machines"
        : `--offerings: ${
          quote(f.offerings)
        } defines no offerings, so the provider serves 0 machines (BigFleet gets no capacity here)`,
    );
  }

  const tls = await loadTls(
    { certFile: f["tls-cert"], keyFile: f["tls-key"], caFile: f["tls-ca"] },
    readFile,
  );

  return {
    addr,
    provider,
    backend,
    fakeDelayMs,
    proxmox,
    catalog,
    offerings,
    // Made on each read, so nothing keeps a fleet's worth of slots once the
    // kit has booted from them (types.ts).
    get slots() {
      return expandSlots(offerings, catalog, provider, pricing);
    },
    offeringsSource: f.offerings === "" ? "built-in" : f.offerings,
    zones,
    template,
    bootstrapPath,
    bootstrapExec,
    readyGate: f["ready-gate"] ? { exec: readyExec, timeoutMs: readyTimeoutMs } : null,
    reconcileIntervalMs,
    shutdownTimeoutMs,
    statePath: f.state,
    adminSocket,
    metricsAddr,
    reflection: f.reflection,
    tls,
    log,
    warnings,
  };
}

async function loadCatalog(
  path: string,
  template: TemplateSource,
  readFile: ReadFile,
): Promise<Map<string, InstanceType>> {
  if (path === "") return builtinCatalog(template);
  const text = await readFlagFile("instance-types", path, readFile);
  return forFile("instance-types", path, () => parseCatalog(text, template));
}

/** --template-name when set, else --template-vmid: one VMID, or zone=VMID pairs. */
function defaultTemplate(vmidText: string, nameText: string): TemplateSource {
  if (nameText !== "") {
    if (vmidText !== FLAG_TABLE["template-vmid"].default) {
      throw new ConfigError("set either --template-vmid or --template-name, not both");
    }
    return forFlag("template-name", () => parseTemplateName(nameText));
  }
  return forFlag(
    "template-vmid",
    () =>
      vmidText.includes("=")
        ? parseZoneVmids(vmidText)
        : { kind: "vmid", vmid: vmid(parseInteger(vmidText), "VMID") },
  );
}

/**
 * Every offering's zone must have a template, and a per-zone map may only
 * name configured nodes. Reported against the flag the operator must fix.
 */
function checkTemplateZones(
  f: FlagValues,
  catalog: Map<string, InstanceType>,
  offerings: readonly Offering[],
  nodes: readonly string[],
): void {
  const typesFlag = f["instance-types"] !== "" ? "instance-types" : "template-vmid";
  for (const it of catalog.values()) {
    const named: [string, string[]][] = [
      ["template", namedZones(it.template)],
      ["storage", storageZones(it)],
    ];
    for (const [what, zones] of named) {
      const stray = zones.find((z) => !nodes.includes(z));
      if (stray === undefined) continue;
      throw flagError(
        typesFlag,
        `${what} of ${quote(it.name)} names zone ${quote(stray)}, which is not one of --nodes (${
          nodes.join(",")
        })`,
      );
    }
  }
  const gap = uncoveredOffering(catalog, offerings);
  if (gap === null) return;
  const what = `${quote(gap.instanceType)} has no template for zone ${quote(gap.zone)} (${
    describeTemplate(gap.template)
  })`;
  if (f.offerings !== "") throw flagError("offerings", `offering ${gap.index}: ${what}`);
  throw flagError(typesFlag, `${what}, which the built-in offerings use`);
}

/** Like forFlag, with the file path in the message. */
function forFile<T>(flag: string, path: string, fn: () => T): T {
  return forFlag(flag, () => {
    try {
      return fn();
    } catch (err) {
      throw new Error(`${quote(path)}: ${err instanceof Error ? err.message : String(err)}`);
    }
  });
}

function parseInteger(text: string): number {
  const t = text.trim();
  const n = Number(t);
  if (!/^[+-]?\d+$/.test(t) || !Number.isSafeInteger(n)) {
    throw new Error(`want an integer, got ${quote(text)}`);
  }
  return n;
}

/**
 * --admin-socket: a path, "off", or empty for the socket beside --state. The
 * path and the name it is bound under first (src/server/admin.ts) must fit a
 * unix socket address.
 */
function adminSocketPath(text: string, state: string): string | null {
  if (text === "off" || (text === "" && state === "")) return null;
  const path = text !== "" ? text : adminSocketFor(state);
  const longest = Math.max(
    utf8Length(path),
    utf8Length(path.slice(0, path.lastIndexOf("/") + 1)) + STAGING_NAME_BYTES,
  );
  if (longest > MAX_SOCKET_PATH) {
    const which = text !== "" ? quote(path) : `${quote(path)} (beside --state)`;
    throw new Error(
      `${which} is too long for a unix socket (at most ${MAX_SOCKET_PATH} bytes with its ` +
        "temporary name): name a shorter --admin-socket, or off",
    );
  }
  return path;
}

function utf8Length(s: string): number {
  return new TextEncoder().encode(s).length;
}

/** Comma-separated argv; every element non-empty. */
function parseArgvList(text: string): string[] {
  if (text.trim() === "") throw new Error("is empty (want e.g. /bin/sh)");
  const parts = text.split(",");
  if (parts.some((p) => p.trim() === "")) throw new Error(`empty element in ${quote(text)}`);
  return parts;
}
