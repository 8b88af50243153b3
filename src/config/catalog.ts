// The instance-type catalog: the built-in pve.* sizes or an operator JSON file
// `{name: {vcpu, memory_mib, template_vmid | template_name, disk_gib, storage,
// clone, network}}` (the last four: instance_options.ts), plus the
// allocatable it implies.

import type { InstanceType, TemplateSource } from "./types.ts";
import { JsonObject, kindOf, objectFields, onlyFields, parseJson, positiveInt } from "./json.ts";
import { quote } from "./errors.ts";
import { checkSegment } from "./segment.ts";
import { entryTemplate } from "./templates.ts";
import { entryOptions, OPTION_FIELDS } from "./instance_options.ts";

const BUILTIN: readonly [string, number, number][] = [
  ["pve.small", 2, 4096],
  ["pve.medium", 4, 8192],
  ["pve.large", 8, 16384],
  ["pve.xlarge", 16, 32768],
];

/** The members an instance type may have (docs/configuration.md#instance-type-catalog). */
const ENTRY_FIELDS = ["vcpu", "memory_mib", "template_vmid", "template_name", ...OPTION_FIELDS];

/** The built-in catalog, every entry cloning from `template`. */
export function builtinCatalog(template: TemplateSource): Map<string, InstanceType> {
  return new Map(
    BUILTIN.map(([name, vcpu, memoryMib]) => [name, { name, vcpu, memoryMib, template }]),
  );
}

/**
 * Parse a catalog file. Throws Error with the problem (the caller names the
 * flag and path). An entry without template_vmid / template_name (or with
 * template_vmid 0) takes `defaultTemplate`.
 */
export function parseCatalog(
  text: string,
  defaultTemplate: TemplateSource,
): Map<string, InstanceType> {
  const root = parseJson(text);
  if (!(root instanceof JsonObject)) {
    throw new Error(`want an object of instance types, got ${kindOf(root)}`);
  }
  if (root.entries.length === 0) throw new Error("defines no instance types");
  const catalog = new Map<string, InstanceType>();
  for (const [name, entry] of root.entries) {
    const where = `instance type ${quote(name)}`;
    checkSegment(name, `${where}: name`);
    const fields = objectFields(entry, where);
    onlyFields(fields, ENTRY_FIELDS, where);
    const vcpu = positiveInt(fields.get("vcpu"), `${where}: vcpu`);
    const memoryMib = positiveInt(fields.get("memory_mib"), `${where}: memory_mib`);
    const template = entryTemplate(fields, where) ?? defaultTemplate;
    catalog.set(name, { name, vcpu, memoryMib, template, ...entryOptions(fields, where) });
  }
  return catalog;
}

/** `[["cpu", "8"], ["memory", "16Gi"]]`: whole GiB as `NGi`, else `NMi`. */
export function allocatableOf(it: InstanceType): [string, string][] {
  const memory = it.memoryMib % 1024 === 0 ? `${it.memoryMib / 1024}Gi` : `${it.memoryMib}Mi`;
  return [["cpu", String(it.vcpu)], ["memory", memory]];
}

/** Catalog names in sorted (code-unit) order, as the built-in offerings pick from. */
export function sortedNames(catalog: Map<string, InstanceType>): string[] {
  return [...catalog.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}
