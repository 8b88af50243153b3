// How the machines commands show machines: a table an operator reads at a
// glance (wide adds money and shape), or every field as JSON/YAML for
// scripts. Text from the provider is untrusted: control characters are
// replaced before anything reaches a terminal.

import { stringify as toYaml } from "yaml";
import { capacityTypeName, stateName, type WireMachine } from "../client/wire.ts";

export const FORMATS = ["table", "wide", "json", "yaml", "name"] as const;
export type Format = (typeof FORMATS)[number];

/** Every field of a machine, enums by name and resource maps flattened. */
export interface MachineView {
  id: string;
  state: string;
  host: { provider: string; ref: string } | null;
  instance_type: string;
  zone: string;
  capacity_type: string;
  price_per_hour: number;
  interruption_probability: number;
  resources: Record<string, string>;
  allocatable: Record<string, string>;
  labels: Record<string, string>;
  cluster: string;
  last_error: string;
  shard_metadata: Record<string, string>;
}

export function view(m: WireMachine): MachineView {
  return {
    id: m.id,
    state: stateName(m.state),
    host: m.host ? { provider: m.host.provider, ref: m.host.ref } : null,
    instance_type: m.instance_type,
    zone: m.zone,
    capacity_type: capacityTypeName(m.capacity_type),
    price_per_hour: m.price_per_hour,
    interruption_probability: m.interruption_probability,
    resources: { ...(m.resources?.resources ?? {}) },
    allocatable: { ...(m.allocatable?.resources ?? {}) },
    labels: { ...m.labels },
    cluster: m.cluster,
    last_error: m.last_error,
    shard_metadata: { ...m.shard_metadata },
  };
}

const collator = new Intl.Collator("en", { numeric: true });

/** By id, numbers in ids compared as numbers (…/small-2 before …/small-10). */
export function byId(a: { id: string }, b: { id: string }): number {
  return collator.compare(a.id, b.id);
}

// C0, DEL and C1 controls (escape sequences start with these), and line breaks.
// deno-lint-ignore no-control-regex
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]+/g;

/** One terminal-safe line, at most `max` characters (… marks a cut). */
export function cell(text: string, max = Infinity): string {
  const clean = text.replace(CONTROL, " ").trim();
  if (clean === "") return "-";
  const chars = [...clean];
  return chars.length <= max ? clean : chars.slice(0, max - 1).join("") + "…";
}

function pairs(map: Record<string, string>): string {
  return Object.keys(map).sort().map((k) => `${k}=${map[k]}`).join(",");
}

const ERROR_WIDTH = 60;
const WIDE_ERROR_WIDTH = 160;

interface Column {
  title: string;
  value(v: MachineView): string;
  /** Room kept from the start, so rows printed later by watch stay aligned. */
  min?: number;
}

const BASE: Column[] = [
  { title: "ID", value: (v) => cell(v.id) },
  { title: "STATE", value: (v) => cell(v.state), min: "CONFIGURING".length },
  { title: "TYPE", value: (v) => cell(v.instance_type) },
  { title: "ZONE", value: (v) => cell(v.zone) },
  { title: "VM", value: (v) => cell(v.host?.ref ?? ""), min: 12 },
  { title: "CLUSTER", value: (v) => cell(v.cluster), min: 10 },
];

const COLUMNS: Record<"table" | "wide", Column[]> = {
  table: [...BASE, { title: "LAST ERROR", value: (v) => cell(v.last_error, ERROR_WIDTH) }],
  wide: [
    ...BASE,
    { title: "CAPACITY", value: (v) => cell(v.capacity_type) },
    { title: "PRICE/H", value: (v) => String(Number(v.price_per_hour.toFixed(6))) },
    { title: "RESOURCES", value: (v) => cell(pairs(v.resources), 40) },
    { title: "LABELS", value: (v) => cell(pairs(v.labels), 60) },
    { title: "LAST ERROR", value: (v) => cell(v.last_error, WIDE_ERROR_WIDTH) },
  ],
};

/** A table printer that keeps its column widths across calls (for watch). */
export class Table {
  readonly #columns: Column[];
  #widths: number[];

  constructor(format: "table" | "wide") {
    this.#columns = COLUMNS[format];
    this.#widths = this.#columns.map((c) => Math.max(c.title.length, c.min ?? 0));
  }

  /** Lines for `views`, with the header line first when `header`. */
  lines(views: MachineView[], header: boolean): string[] {
    const rows = views.map((v) => this.#columns.map((c) => c.value(v)));
    for (const row of rows) {
      row.forEach((text, i) => this.#widths[i] = Math.max(this.#widths[i], [...text].length));
    }
    const all = header ? [this.#columns.map((c) => c.title), ...rows] : rows;
    return all.map((row) =>
      row.map((text, i) => i === row.length - 1 ? text : pad(text, this.#widths[i])).join("   ")
    );
  }
}

function pad(text: string, width: number): string {
  return text + " ".repeat(Math.max(0, width - [...text].length));
}

/** A document for json/yaml: one machine, or a list with its revision cursor. */
export function document(format: "json" | "yaml", doc: unknown, compact = false): string {
  if (format === "json") return JSON.stringify(doc, null, compact ? 0 : 2) + "\n";
  return toYaml(doc, { lineWidth: 0 });
}

/** base64 of the List revision cursor, as grpcurl and protobuf JSON show bytes. */
export function revisionText(revision: Uint8Array): string {
  let bin = "";
  for (const b of revision) bin += String.fromCharCode(b);
  return btoa(bin);
}
