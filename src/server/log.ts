// Structured logs: one JSON object per line on stderr, written synchronously
// so a line is never lost to an exit or reordered. The level comes from
// BIGFLEET_LOG_LEVEL (default info; debug shows Get/List lines).

import { configureSync, getJsonLinesFormatter, isLogLevel } from "@logtape/logtape";
import type { LogLevel, LogRecord } from "@logtape/logtape";

export function setupLogging(level?: string): void {
  const wanted = level ?? Deno.env.get("BIGFLEET_LOG_LEVEL") ?? "info";
  const lowestLevel: LogLevel = isLogLevel(wanted) ? wanted : "info";
  const format = getJsonLinesFormatter({
    categorySeparator: ".",
    message: "rendered",
    properties: "flatten",
  });
  const encoder = new TextEncoder();
  const stderr = (record: LogRecord) => {
    Deno.stderr.writeSync(encoder.encode(format(record)));
  };
  configureSync({
    reset: true,
    sinks: { stderr },
    loggers: [
      { category: ["bigfleet"], lowestLevel, sinks: ["stderr"] },
      { category: ["logtape", "meta"], lowestLevel: "warning", sinks: ["stderr"] },
    ],
  });
}
