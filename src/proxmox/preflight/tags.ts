// The tag-policy part of preflight: will the datacenter let the token set
// --proxmox-tags, and remove the tags the templates pass on? A token
// without Sys.Modify on / may change a tag only when `user-tag-access`
// allows it and it is not in `registered-tags` (PVE's
// assert_tag_permissions). GET /cluster/options shows the policy with
// Sys.Audit on /; without it only `allowed-tags`, the tags PVE would let the
// token set outside `free`, from which a restricted mode can sometimes be
// told: under `free` and `existing` the templates' own tags are among them
// (docs/configuration.md#tags-and-the-tag-policy). A refused tag never
// breaks a Create, so the worst verdict is WARN.

import { MACHINE_TAG_TOKEN } from "../../config/proxmox.ts";
import { type DatacenterOptions, readDatacenterOptions } from "../cluster/datacenter.ts";
import type { ApiClient } from "../api/client.ts";
import type { Permissions } from "./permissions.ts";
import { type CheckResult, pass, warn } from "./result.ts";
import type { PreflightRun } from "./run.ts";
import type { Found } from "./templates.ts";
import { parseTags } from "../naming.ts";

const CHECK = "tags";
const DOCS = "docs/configuration.md#tags-and-the-tag-policy";

/** Whether the token may add or remove `tag`: true, false, or unknown (null). */
type Verdict = boolean | null;

function judge(dc: DatacenterOptions, restricted: boolean) {
  const allowed = new Set(dc.allowedTags);
  const registered = new Set(dc.registeredTags);
  return (tag: string | typeof MACHINE_TAG_TOKEN): Verdict => {
    if (dc.readable) {
      // PVE: refused when (not allowed and not free) or registered.
      if (tag === MACHINE_TAG_TOKEN) return dc.tagMode === "free";
      return dc.tagMode === "free" ? !registered.has(tag) : allowed.has(tag);
    }
    if (tag !== MACHINE_TAG_TOKEN && allowed.has(tag)) return true;
    return restricted ? false : null;
  };
}

const quoted = (tags: string[]) => tags.map((t) => `'${t}'`).join(", ");

/** One line on the tags: PASS, or WARN naming what the policy refuses and how to allow it. */
export async function checkTags(
  api: ApiClient,
  perms: Permissions,
  configured: readonly string[],
  inherited: readonly string[],
  signal: AbortSignal,
): Promise<CheckResult> {
  const subject = configured.length > 0 ? configured.join(",") : "(none)";
  if ((await perms.at("/")).has("Sys.Modify")) {
    return pass(CHECK, subject, "the token holds Sys.Modify on /: it may set and remove any tag");
  }
  const dc = await readDatacenterOptions(api, signal);
  const fixed = configured.filter((t) => t !== MACHINE_TAG_TOKEN);
  const machine = configured.includes(MACHINE_TAG_TOKEN);
  // The token reads the templates: under free and existing their tags are in allowed-tags.
  const restricted = !dc.readable && inherited.some((t) => !dc.allowedTags.includes(t));
  const may = judge(dc, restricted);
  const refused = fixed.filter((t) => may(t) === false);
  const machineRefused = machine && may(MACHINE_TAG_TOKEN) === false;
  const stays = inherited.filter((t) => !fixed.includes(t) && may(t) === false);
  const policy = dc.readable ? `user-allow=${dc.tagMode}` : "the datacenter's tag policy";
  const staysNote = stays.length === 0
    ? ""
    : `; the template's ${
      stays.length === 1 ? `tag ${stays[0]} stays` : `tags ${stays.join(", ")} stay`
    } on its clones (the policy does not let the token remove ${
      stays.length === 1 ? "it" : "them"
    })`;
  const registered = refused.filter((t) => dc.registeredTags.includes(t));
  if (registered.length > 0) {
    return warn(
      CHECK,
      subject,
      `${quoted(registered)} ${
        registered.length === 1 ? "is a registered tag" : "are registered tags"
      }` +
        ` (registered-tags): only Sys.Modify on / may set or remove ${
          registered.length === 1 ? "it" : "them"
        }, so VMs go without ${registered.length === 1 ? "it" : "them"}${staysNote}`,
      `remove it from registered-tags (Datacenter > Options > Registered Tags), grant the token ` +
        `and its user Sys.Modify on /, or leave it out of --proxmox-tags (${DOCS})`,
    );
  }
  if (refused.length > 0 || machineRefused) {
    const what = [
      ...(refused.length > 0 ? [`tag ${quoted(refused)}`] : []),
      ...(machineRefused ? [`the per-machine tag (${MACHINE_TAG_TOKEN})`] : []),
    ].join(" and ");
    const list = [...new Set([...dc.allowList, ...refused])].join(";");
    const fixes = [
      ...(refused.length === 0
        ? []
        : dc.tagMode === "none" && dc.readable
        ? [`set user-allow to list with user-allow-list=${list}`]
        : [
          `allow it: pvesh set /cluster/options --user-tag-access 'user-allow=${
            dc.readable ? dc.tagMode : "list"
          },user-allow-list=${list}' (Datacenter > Options > User Tag Access)`,
        ]),
      ...(machineRefused
        ? [`leave ${MACHINE_TAG_TOKEN} out of --proxmox-tags (the marker identifies VMs)`]
        : []),
      "grant the token and its user Sys.Modify on /",
      "or run with --proxmox-tags= (no tags)",
    ];
    return warn(
      CHECK,
      subject,
      `${policy} refuses ${what}: VMs go without it (they are known by their marker, so only ` +
        `the tag is lost)${staysNote}`,
      `${fixes.join("; ")} (${DOCS})`,
    );
  }
  if (fixed.some((t) => may(t) === null) || (machine && may(MACHINE_TAG_TOKEN) === null)) {
    return pass(
      CHECK,
      subject,
      `cannot read the tag policy (no Sys.Audit on /), and PVE does not list ${
        fixed.length > 0 ? fixed.join(", ") : "a per-machine tag"
      } among the tags the token may set outside user-allow=free, the default, where any tag ` +
        `goes; a policy that refuses one costs only the tag (the provider logs it once)`,
    );
  }
  const setting = fixed.length > 0
    ? `lets the token set ${fixed.join(", ")}${machine ? " and per-machine tags" : ""}`
    : machine
    ? "lets the token set per-machine tags"
    : "is not asked for any tag";
  return pass(CHECK, subject, `${policy} ${setting}${staysNote}`);
}

/** The tags step: the configured tags, and the tags the found templates pass on to their clones. */
export async function tagCheck(run: PreflightRun, found: readonly Found[]): Promise<CheckResult[]> {
  const inherited = [...new Set(found.flatMap((f) => parseTags(f.tmpl.config.tags)))].sort();
  return [await checkTags(run.api, run.perms, run.px.tags, inherited, run.signal)];
}
