// Structured logs: one JSON object per line on stderr, written synchronously
// so a line is never lost to an exit or reordered. The level comes from
// BIGFLEET_LOG_LEVEL (default info; debug shows Get/List lines).

import * as grpc from "@grpc/grpc-js";
import { configureSync, getJsonLinesFormatter, getLogger, isLogLevel } from "@logtape/logtape";
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
    const bytes = encoder.encode(format(plainMessage(record)));
    for (let off = 0; off < bytes.length;) off += Deno.stderr.writeSync(bytes.subarray(off));
  };
  configureSync({
    reset: true,
    sinks: { stderr },
    loggers: [
      { category: ["bigfleet"], lowestLevel, sinks: ["stderr"] },
      { category: ["logtape", "meta"], lowestLevel: "warning", sinks: ["stderr"] },
    ],
  });

  // grpc-js prints its own diagnostics with console.error; route them into
  // the structured log at debug so stderr stays one JSON object per line.
  const grpcLog = getLogger(["bigfleet", "grpc-js"]);
  grpc.setLogger({
    error: (...args: unknown[]) => grpcLog.debug(args.map(String).join(" ")),
    info: (...args: unknown[]) => grpcLog.debug(args.map(String).join(" ")),
    debug: (...args: unknown[]) => grpcLog.debug(args.map(String).join(" ")),
  } as Partial<Console>);
}

/**
 * The message with string values as they are: logtape renders them
 * JSON-quoted ("\"Create\" failed"), which reads badly once the line is
 * itself JSON. The values stay available, typed, as flattened properties.
 */
function plainMessage(record: LogRecord): LogRecord {
  let text = "";
  record.message.forEach((part, i) => {
    if (i % 2 === 0 || typeof part === "string") text += String(part);
    else if (typeof part === "bigint") text += part.toString();
    else text += JSON.stringify(part) ?? String(part);
  });
  return { ...record, message: [text] };
}
