// The hooks line of preflight: what it cannot check, and how to.

import type { Config } from "../../config/types.ts";
import { type CheckResult, skipped } from "./result.ts";

/** The hooks live inside the template's disk; a template never runs. */
export function hooksCheck(cfg: Config): CheckResult {
  const exec = [...cfg.bootstrapExec, cfg.bootstrapPath].join(" ");
  return skipped(
    "hooks",
    exec,
    "not checked: the bootstrap hook (run as `" + exec + "`) and kubectl (for Drain) live " +
      "inside the templates, and a template never runs, so its guest agent cannot be asked; " +
      "preflight starts nothing",
    "check them when building the template (docs/templates.md), or on a clone: " +
      "qm guest exec <vmid> -- test -x <path>",
  );
}
