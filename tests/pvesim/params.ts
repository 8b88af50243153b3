// Parameter schemas and validation modelled on pve-common JSONSchema
// (check_type / validate): additionalProperties=0 everywhere, booleans only
// 1/0/true/false, integers as numbers or numeric strings, arrays wrapped
// from scalars, error texts as PVE words them.

import { paramError } from "./errors.ts";

export type ParamType = "integer" | "boolean" | "string" | "array";

export interface ParamSpec {
  type: ParamType;
  optional?: boolean;
  min?: number;
  max?: number;
  maxLength?: number;
  enum?: string[];
  /** Returns an error text (PVE style) or null when the value is fine. */
  format?: (v: string) => string | null;
}

export type Schema = Record<string, ParamSpec>;
export type Params = Record<string, string | number | boolean | string[]>;

const DNS_LABEL = /^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?$/;

export function dnsName(v: string): string | null {
  return v.split(".").every((l) => DNS_LABEL.test(l))
    ? null
    : "invalid format - value does not look like a valid DNS name\n";
}

export function nodeName(v: string): string | null {
  return DNS_LABEL.test(v) ? null : "invalid format - value does not look like a valid node name\n";
}

export function vmidFormat(v: string): string | null {
  return /^[1-9][0-9]{2,8}$/.test(v)
    ? null
    : "invalid format - value does not look like a valid VM ID\n";
}

export function poolId(v: string): string | null {
  return /^[A-Za-z0-9_][A-Za-z0-9_\-]*$/.test(v)
    ? null
    : "invalid format - value does not look like a valid pool identifier\n";
}

const TAG = /^[a-z0-9_][a-z0-9_\-+.]*$/i;

/** Splits a pve-tag-list on `;`, `,` or whitespace. */
export function splitTags(v: string): string[] {
  return v.split(/[;,\s]+/).filter((t) => t.length > 0);
}

export function tagList(v: string): string | null {
  return splitTags(v).every((t) => TAG.test(t))
    ? null
    : "invalid format - invalid characters in tag\n";
}

/** How PVE stores tags by default: lower-cased, de-duplicated, sorted, `;`-joined. */
export function normaliseTags(v: string): string {
  return [...new Set(splitTags(v).map((t) => t.toLowerCase()))].sort().join(";");
}

/** `[current=]<integer>` (qemu-server ≥ 8.1 memory property string). */
export function memoryFormat(v: string): string | null {
  const m = v.match(/^(?:current=)?(\d+)$/);
  if (!m) return "invalid format - format error\n";
  if (Number(m[1]) < 16) return "invalid format - current: value must have a minimum value of 16\n";
  return null;
}

export function memoryValue(v: string): number {
  return Number(v.replace(/^current=/, ""));
}

/** Code points, as Perl counts string length. */
function charLength(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}

function typeCheck(
  name: string,
  spec: ParamSpec,
  raw: unknown,
  errors: Record<string, string>,
): string | number | boolean | string[] | undefined {
  if (spec.type === "array") {
    const arr = Array.isArray(raw) ? raw : [raw];
    if (arr.some((x) => typeof x !== "string" && typeof x !== "number")) {
      errors[name] = "type check ('string') failed";
      return undefined;
    }
    return arr.map(String);
  }
  if (Array.isArray(raw)) {
    errors[name] = `type check ('${spec.type}') failed - got ARRAY`;
    return undefined;
  }
  if (raw !== null && typeof raw === "object") {
    errors[name] = `type check ('${spec.type}') failed - got HASH`;
    return undefined;
  }
  if (spec.type === "boolean") {
    if (raw === true || raw === 1 || raw === "1") return true;
    if (raw === false || raw === 0 || raw === "0") return false;
    errors[name] = `type check ('boolean') failed - got '${raw}'`;
    return undefined;
  }
  if (spec.type === "integer") {
    const s = String(raw);
    if (typeof raw === "boolean" || !/^-?\d+$/.test(s)) {
      errors[name] = `type check ('integer') failed - got '${s}'`;
      return undefined;
    }
    const n = Number(s);
    if (spec.format) {
      const e = spec.format(s);
      if (e) {
        errors[name] = e;
        return undefined;
      }
    }
    if (spec.min !== undefined && n < spec.min) {
      errors[name] = `value must have a minimum value of ${spec.min}`;
      return undefined;
    }
    if (spec.max !== undefined && n > spec.max) {
      errors[name] = `value must have a maximum value of ${spec.max}`;
      return undefined;
    }
    return n;
  }
  // string: Perl scalars, so numbers are fine; JSON true/false are not strings.
  if (typeof raw === "boolean") {
    errors[name] = `type check ('string') failed - got '${raw ? 1 : 0}'`;
    return undefined;
  }
  const s = String(raw);
  if (spec.maxLength !== undefined && charLength(s) > spec.maxLength) {
    errors[name] = `value may only be ${spec.maxLength} characters long`;
    return undefined;
  }
  if (spec.enum && !spec.enum.includes(s)) {
    errors[name] = `value '${s}' does not have a value in the enumeration '${
      spec.enum.join(", ")
    }'`;
    return undefined;
  }
  if (spec.format) {
    const e = spec.format(s);
    if (e) {
      errors[name] = e;
      return undefined;
    }
  }
  return s;
}

/** Validates merged request parameters; throws a 400 ApiError listing every problem. */
export function validate(schema: Schema, input: Record<string, unknown>): Params {
  const errors: Record<string, string> = {};
  const out: Params = {};
  for (const [name, raw] of Object.entries(input)) {
    const spec = schema[name];
    if (!spec) {
      errors[name] =
        "property is not defined in schema and the schema does not allow additional properties";
      continue;
    }
    const v = typeCheck(name, spec, raw, errors);
    if (v !== undefined) out[name] = v;
  }
  for (const [name, spec] of Object.entries(schema)) {
    if (!spec.optional && !(name in input)) {
      errors[name] = "property is missing and it is not optional";
    }
  }
  if (Object.keys(errors).length > 0) throw paramError(errors);
  return out;
}

// Path parameters shared by many endpoints.
export const NODE: ParamSpec = { type: "string", format: nodeName };
export const VMID: ParamSpec = { type: "integer", format: vmidFormat };

/** Checks that need no VM: token callers may never skiplock (root@pam only). */
export function rejectSkiplock(params: Params): void {
  if (params.skiplock !== undefined) {
    throw paramError({ skiplock: "Only root may use this option." });
  }
}
