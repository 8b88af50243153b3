// Results of a conformance run, read from the JUnit XML `deno test` writes
// (--junit-path) and written back as the runner's reports: a JUnit XML with
// one suite per lane and a JSON document, both keyed by behaviour id. A
// behaviour the run should have reported but did not (the run stopped early)
// is "missing" and fails the run.

import type { Expected, Lane } from "./lanes.ts";

export type Status = "passed" | "failed" | "skipped" | "missing";

/** One testcase as Deno's JUnit reporter wrote it. */
export interface RawCase {
  name: string;
  seconds: number;
  status: "passed" | "failed" | "skipped";
  message: string;
}

export interface Result {
  /** Behaviour id (B101, "baseline FullLifecycle"); null for the lanes' own checks. */
  id: string | null;
  lane: Lane | "checks";
  title: string;
  status: Status;
  seconds: number;
  message: string;
}

export interface Summary {
  total: number;
  passed: number;
  failed: number;
  skipped: number;
  missing: number;
}

export interface Report {
  results: Result[];
  summary: Summary;
  /** passed: everything passed or skipped; incomplete: results missing; failed: any failure. */
  outcome: "passed" | "failed" | "incomplete";
}

const ENTITIES: Record<string, string> = {
  amp: "&",
  lt: "<",
  gt: ">",
  quot: '"',
  apos: "'",
};

function unescapeXml(s: string): string {
  return s.replace(/&(#x[0-9a-fA-F]+|#\d+|\w+);/g, (whole, e: string) => {
    if (e.startsWith("#x")) return String.fromCodePoint(parseInt(e.slice(2), 16));
    if (e.startsWith("#")) return String.fromCodePoint(Number(e.slice(1)));
    return ENTITIES[e] ?? whole;
  });
}

// deno-lint-ignore no-control-regex
const XML_FORBIDDEN = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\ufffe\uffff]/g;

function escapeXml(s: string): string {
  return s.replace(XML_FORBIDDEN, "\ufffd").replace(/&/g, "&amp;").replace(/</g, "&lt;")
    .replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

function attrs(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of text.matchAll(/([\w:-]+)="([^"]*)"/g)) out[m[1]] = unescapeXml(m[2]);
  return out;
}

/** The testcases of Deno's JUnit XML (the only producer this reads). */
export function parseDenoJunit(xml: string): RawCase[] {
  const out: RawCase[] = [];
  for (const m of xml.matchAll(/<testcase\b([^>]*?)(?:\/>|>([\s\S]*?)<\/testcase>)/g)) {
    const a = attrs(m[1]);
    const body = m[2] ?? "";
    const failure = /<failure\b([^>]*?)(?:\/>|>([\s\S]*?)<\/failure>)/.exec(body);
    const status = failure ? "failed" : /<skipped\b/.test(body) ? "skipped" : "passed";
    const message = failure ? (attrs(failure[1]).message ?? unescapeXml(failure[2] ?? "")) : "";
    out.push({ name: a.name ?? "", seconds: Number(a.time ?? 0) || 0, status, message });
  }
  return out;
}

const NAME = /^\[([^\]]+)\] (.*)$/s;
const ID = /^(baseline \S+|B\d+)(?: (.*))?$/s;

/** Turn `[label] id title` testcases into results, adding the expected ones that never ran. */
export function classify(raw: RawCase[], expected: Expected[]): Report {
  const byId = new Map(expected.map((e) => [e.id, e]));
  const results: Result[] = [];
  const seen = new Set<string>();
  for (const c of raw) {
    const named = NAME.exec(c.name);
    const rest = named ? named[2] : c.name;
    const id = ID.exec(rest);
    const want = id ? byId.get(id[1]) : undefined;
    const base = { status: c.status, seconds: c.seconds, message: c.message };
    if (id && want) {
      seen.add(want.id);
      results.push({ ...base, id: want.id, lane: want.lane, title: id[2] ?? want.title });
    } else {
      results.push({ ...base, id: null, lane: "checks", title: c.name });
    }
  }
  for (const e of expected) {
    if (seen.has(e.id)) continue;
    results.push({
      id: e.id,
      lane: e.lane,
      title: e.title,
      status: "missing",
      seconds: 0,
      message: "no result: the run ended before this behaviour reported",
    });
  }
  const count = (s: Status) => results.filter((r) => r.status === s).length;
  const summary = {
    total: results.length,
    passed: count("passed"),
    failed: count("failed"),
    skipped: count("skipped"),
    missing: count("missing"),
  };
  const outcome = summary.failed > 0 ? "failed" : summary.missing > 0 ? "incomplete" : "passed";
  return { results, summary, outcome };
}

/** JUnit XML: one testsuite per lane, testcase names starting with the behaviour id. */
export function junitXml(report: Report, name: string): string {
  const lanes = new Map<string, Result[]>();
  for (const r of report.results) lanes.set(r.lane, [...(lanes.get(r.lane) ?? []), r]);
  const time = (rs: Result[]) => rs.reduce((t, r) => t + r.seconds, 0).toFixed(3);
  const s = report.summary;
  const out = [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<testsuites name="${escapeXml(name)}" tests="${s.total}" failures="${
      s.failed + s.missing
    }" skipped="${s.skipped}" time="${time(report.results)}">`,
  ];
  for (const [lane, rs] of lanes) {
    const failures = rs.filter((r) => r.status === "failed" || r.status === "missing").length;
    const skipped = rs.filter((r) => r.status === "skipped").length;
    out.push(
      `  <testsuite name="${lane}" tests="${rs.length}" failures="${failures}" skipped="${skipped}" time="${
        time(rs)
      }">`,
    );
    for (const r of rs) {
      const title = r.id ? `${r.id} ${r.title}`.trim() : r.title;
      const open = `    <testcase classname="conformance.${lane}" name="${
        escapeXml(title)
      }" time="${r.seconds.toFixed(3)}"`;
      if (r.status === "passed") {
        out.push(`${open}/>`);
        continue;
      }
      out.push(`${open}>`);
      if (r.status === "skipped") out.push("      <skipped/>");
      else {
        const first = r.message.split("\n")[0];
        out.push(
          `      <failure message="${escapeXml(first)}" type="${r.status}">${
            escapeXml(r.message)
          }</failure>`,
        );
      }
      out.push("    </testcase>");
    }
    out.push("  </testsuite>");
  }
  out.push("</testsuites>");
  return out.join("\n") + "\n";
}
