// A VM's NICs (`netN`) as qemu-server parses, prints and checks them
// (QemuServer/Network.pm $net_fmt, parse_net/print_net; API2/Qemu.pm
// update_vm_api): the property string's schema with pve-common's error
// texts, a fresh MAC for a value that names none (parse_net generates one,
// so a PUT that leaves `macaddr` out changes the guest's MAC), the canonical
// print (`<model>=<MAC>` first, the other keys sorted), and SDN.Use on the
// new value's bridge or VLAN before the VM's lock is checked, then on the
// old value of every NIC changed or deleted (check_bridge_access). What a
// start does with bridges and MTUs is startcheck.ts's.

import { checkNetworkAccess } from "./acl.ts";
import type { Params, ParamSpec, Schema } from "./params.ts";
import type { SimCore } from "./router.ts";
import type { VmRecord } from "./state.ts";

export const NIC_MODELS = [
  "e1000",
  "e1000-82540em",
  "e1000-82544gc",
  "e1000-82545em",
  "e1000e",
  "i82551",
  "i82557b",
  "i82559er",
  "ne2k_isa",
  "ne2k_pci",
  "pcnet",
  "rtl8139",
  "virtio",
  "vmxnet3",
];

/** $net_fmt's keys besides the model: type and bounds. */
const NET_KEYS: Record<
  string,
  {
    type: "integer" | "number" | "boolean" | "string";
    min?: number;
    max?: number;
    pattern?: RegExp;
  }
> = {
  macaddr: { type: "string", pattern: /^[0-9a-f]{2}(:[0-9a-f]{2}){5}$/i },
  bridge: { type: "string", pattern: /^[-_.\w\d]+$/ },
  queues: { type: "integer", min: 0, max: 64 },
  rate: { type: "number", min: 0 },
  tag: { type: "integer", min: 1, max: 4094 },
  trunks: { type: "string", pattern: /^\d+(?:-\d+)?(?:;\d+(?:-\d+)?)*$/ },
  firewall: { type: "boolean" },
  link_down: { type: "boolean" },
  mtu: { type: "integer", min: 1, max: 65520 },
};

export interface Nic {
  model: string;
  macaddr?: string;
  /** The other keys, raw. */
  props: Record<string, string>;
}

/** parse_property_string over $net_fmt; throws the text pve-common dies with. */
export function parseNic(value: string): Nic {
  const nic: Nic = { model: "", props: {} };
  for (const part of value.split(",").filter((p) => !/^\s*$/.test(p))) {
    const eq = part.indexOf("=");
    const [k, v] = eq < 0 ? [part, undefined] : [part.slice(0, eq), part.slice(eq + 1)];
    if (v === undefined) nic.model = k; // the default key
    else if (NIC_MODELS.includes(k)) {
      nic.model = k;
      nic.macaddr = v;
    } else if (k === "model") nic.model = v;
    else if (k === "macaddr") nic.macaddr = v;
    else if (NET_KEYS[k] === undefined) {
      throw new Error(`invalid key in comma-separated list property: ${k}`);
    } else nic.props[k] = v;
  }
  return nic;
}

/** check_object's error for one key of the property string, or null. */
function keyError(key: string, value: string): string | null {
  const spec = NET_KEYS[key];
  if (spec.type === "integer" && !/^[+-]?\d+$/.test(value)) {
    return `type check ('integer') failed - got '${value}'`;
  }
  if (spec.type === "number" && !/^[+-]?(\d+\.\d+|\d+\.|\.\d+|\d+)([eE][+-]?\d+)?$/.test(value)) {
    return `type check ('number') failed - got '${value}'`;
  }
  if (spec.type === "boolean" && !/^(1|0|on|off|yes|no|true|false)$/i.test(value)) {
    return `type check ('boolean') failed - got '${value}'`;
  }
  if (spec.pattern && !spec.pattern.test(value)) return "value does not match the regex pattern";
  if (spec.max !== undefined && Number(value) > spec.max) {
    return `value must have a maximum value of ${spec.max}`;
  }
  if (spec.min !== undefined && Number(value) < spec.min) {
    return `value must have a minimum value of ${spec.min}`;
  }
  return null;
}

/** The schema `format` of `netN`: pve-common's `invalid format - …` texts, keyed by `netN.<key>`. */
function nicFormat(opt: string): (v: string) => string | null {
  return (v) => {
    let nic: Nic;
    try {
      nic = parseNic(v);
    } catch (e) {
      return `invalid format - ${(e as Error).message}\n`;
    }
    const errors: string[] = [];
    if (nic.model === "") errors.push(`${opt}.model: property is missing and it is not optional`);
    else if (!NIC_MODELS.includes(nic.model)) {
      errors.push(
        `${opt}.model: value '${nic.model}' does not have a value in the enumeration '${
          NIC_MODELS.join(", ")
        }'`,
      );
    }
    if (nic.macaddr !== undefined) {
      const e = keyError("macaddr", nic.macaddr);
      if (e) errors.push(`${opt}.macaddr: ${e}`);
    }
    for (const [k, val] of Object.entries(nic.props).sort(([a], [b]) => (a < b ? -1 : 1))) {
      const e = keyError(k, val);
      if (e) errors.push(`${opt}.${k}: ${e}`);
    }
    return errors.length === 0 ? null : `invalid format - format error\n${errors.join("\n")}\n`;
  };
}

/** `net0` … `net31` for PUT/POST config. */
export const NIC_SCHEMA: Schema = Object.fromEntries(
  Array.from({ length: 32 }, (_, i): [string, ParamSpec] => [
    `net${i}`,
    { type: "string", optional: true, format: nicFormat(`net${i}`) },
  ]),
);

function randomMac(): string {
  const b = crypto.getRandomValues(new Uint8Array(3));
  return ["BC", "24", "11", ...Array.from(b, (x) => x.toString(16).padStart(2, "0"))]
    .join(":").toUpperCase();
}

/** print_net: `<model>=<MAC>`, then every other key sorted. */
export function printNic(nic: Nic): string {
  const rest = Object.keys(nic.props).sort().map((k) => `${k}=${nic.props[k]}`);
  return [`${nic.model}=${nic.macaddr ?? randomMac()}`, ...rest].join(",");
}

/** update_vm_api's first pass over `netN`: parse_net (a new MAC when none is named), print_net. */
export function normalizeNics(params: Params): Params {
  const out = { ...params };
  for (const [k, v] of Object.entries(params)) {
    if (/^net\d+$/.test(k)) out[k] = printNic(parseNic(String(v)));
  }
  return out;
}

/** A config change's NICs: printed as PVE stores them, then their bridges' SDN.Use checked. */
export function prepareNics(
  core: SimCore,
  vm: VmRecord,
  params: Params,
  deletes: string[],
): Params {
  const out = normalizeNics(params);
  checkNicAccess(core, vm, out, deletes);
  return out;
}

/** check_bridge_access on the new NIC values (before the lock) and the old ones changed or deleted. */
export function checkNicAccess(
  core: SimCore,
  vm: VmRecord,
  params: Params,
  deletes: string[],
): void {
  const nets = Object.keys(params).filter((k) => /^net\d+$/.test(k));
  checkNetworkAccess(core, Object.fromEntries(nets.map((k) => [k, params[k]])));
  const old = [...nets, ...deletes.filter((k) => /^net\d+$/.test(k))];
  checkNetworkAccess(
    core,
    Object.fromEntries(old.filter((k) => vm.config[k] !== undefined).map((k) => [k, vm.config[k]])),
  );
}
