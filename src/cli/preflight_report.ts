// How preflight reports: one line per check for people (`text`, the
// default: STATUS, check, subject: message, then the fix), or one document
// for automation (`json`, `yaml`) with the same fields and a summary.

import { type CheckResult, plural, type Status } from "../proxmox/mod.ts";
import { cell, document } from "./machine_view.ts";

export const FORMATS = ["text", "json", "yaml"] as const;
export type Format = (typeof FORMATS)[number];

export interface Report {
  backend: "proxmox" | "fake";
  apiUrl: string | null;
  pveVersion: string | null;
  results: CheckResult[];
}

/** Nothing FAILed: the only condition for exit 0. */
export function ok(results: readonly CheckResult[]): boolean {
  return !results.some((r) => r.status === "FAIL");
}

function counts(results: readonly CheckResult[]): Record<Lowercase<Status>, number> {
  const n = (s: Status) => results.filter((r) => r.status === s).length;
  return { pass: n("PASS"), warn: n("WARN"), fail: n("FAIL"), skip: n("SKIP") };
}

/** The report as `format`; text is made terminal-safe (API texts are untrusted). */
export function render(format: Format, report: Report): string {
  const c = counts(report.results);
  if (format !== "text") {
    return document(format, {
      ok: ok(report.results),
      backend: report.backend,
      api_url: report.apiUrl,
      pve_version: report.pveVersion,
      summary: c,
      checks: report.results.map((r) => ({
        check: r.check,
        subject: r.subject,
        status: r.status,
        message: r.message,
        fix: r.fix,
      })),
    });
  }
  const width = Math.max(...report.results.map((r) => r.check.length));
  const lines = report.results.map((r) => {
    const what = r.subject === "" ? cell(r.message) : `${cell(r.subject)}: ${cell(r.message)}`;
    const fix = r.fix === null ? "" : `. Fix: ${cell(r.fix)}`;
    return `${r.status.padEnd(4)}  ${r.check.padEnd(width)}  ${what}${fix}`;
  });
  const verdict = ok(report.results)
    ? "ready (nothing failed)"
    : "NOT ready: fix the FAIL lines and run it again";
  lines.push(
    `preflight: ${c.pass} passed, ${plural(c.warn, "warning")}, ${c.fail} failed, ` +
      `${c.skip} skipped: ${verdict}`,
  );
  return lines.join("\n") + "\n";
}
