// The conformance runner's lanes and the environment it hands `deno test`
// (tests/conformance/run.ts → the lane files). Which behaviours a run holds
// is decided here once, for the lane file that registers them and for the
// runner that reports any of them without a result.

import type { Behavior } from "../behaviors/behavior.ts";
import { BASELINE_LANE, EXTENSION_LANE } from "../suite.ts";

export const LANES = ["baseline", "extension", "durable", "scale"] as const;
export type Lane = (typeof LANES)[number];

/** Lanes that restart or freshly boot the provider, so they need a command to start it. */
export const SPAWN_ONLY: readonly Lane[] = ["durable", "scale"];

/** Environment the runner sets for the lane files (plus BFCONF_PROVIDER_CMD, BFCONF_SEED, …). */
export const ENV = {
  target: "BFCONF_TARGET",
  lanes: "BFCONF_LANES",
  run: "BFCONF_RUN",
  seedCount: "BFCONF_SEED_COUNT",
  tls: "BFCONF_TLS",
  tlsCa: "BFCONF_TLS_CA",
  tlsCert: "BFCONF_TLS_CERT",
  tlsKey: "BFCONF_TLS_KEY",
  tlsServerName: "BFCONF_TLS_SERVER_NAME",
} as const;

/** Test files per lane, relative to tests/conformance/. */
export const LANE_FILES: Record<Lane, string> = {
  baseline: "runner/suite_lane.ts",
  extension: "runner/suite_lane.ts",
  durable: "durable_test.ts",
  scale: "scale_test.ts",
};

/** The behaviour ids the restart lanes report (their own files hold the checks). */
const RESTART_IDS: Record<"durable" | "scale", string[]> = {
  durable: ["B1001", "B1002", "B1003", "B1004", "B1005", "B1006", "B1007"],
  scale: ["B1101", "B1102", "B1103", "B1104", "B1105", "B1106", "B1107", "B1108", "B1109"],
};

export function laneOf(b: { id: string }): "baseline" | "extension" {
  return b.id.startsWith("baseline ") ? "baseline" : "extension";
}

/** `--run`: a behaviour is kept when the regex finds its id or title. */
export function suiteSelection(lanes: ReadonlySet<string>, run: RegExp | null) {
  return (b: Behavior) => lanes.has(laneOf(b)) && (run === null || run.test(`${b.id} ${b.title}`));
}

export interface Expected {
  id: string;
  lane: Lane;
  title: string;
}

/** Every behaviour the run must report a result for. */
export function expectedBehaviours(lanes: ReadonlySet<Lane>, run: RegExp | null): Expected[] {
  const keep = suiteSelection(lanes, run);
  const out: Expected[] = [...BASELINE_LANE, ...EXTENSION_LANE].filter(keep)
    .map((b) => ({ id: b.id, lane: laneOf(b), title: b.title }));
  for (const lane of ["durable", "scale"] as const) {
    if (lanes.has(lane)) out.push(...RESTART_IDS[lane].map((id) => ({ id, lane, title: "" })));
  }
  return out;
}
