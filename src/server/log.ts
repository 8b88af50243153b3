// Structured logs on stderr, one line per record, written synchronously so a
// line is never lost to an exit or reordered: JSON objects by default, or
// text for a terminal (`--log-format=text`). Level and format come from
// src/config/logging.ts (docs/observability.md#logs).

import * as grpc from "@grpc/grpc-js";
import { configureSync, getJsonLinesFormatter, getLogger } from "@logtape/logtape";
import type { LogRecord } from "@logtape/logtape";
import { loadLogging, type LogSettings } from "../config/logging.ts";

/** Sets up the loggers; without settings, from BIGFLEET_LOG_LEVEL / BIGFLEET_LOG_FORMAT. */
export function setupLogging(settings?: LogSettings): void {
  const { level: lowestLevel, format } = settings ?? loadLogging({ level: "", format: "" });
  const json = getJsonLinesFormatter({
    categorySeparator: ".",
    message: "rendered",
    properties: "flatten",
  });
  const render = format === "text" ? textLine : json;
  const encoder = new TextEncoder();
  const stderr = (record: LogRecord) => {
    const bytes = encoder.encode(render(plainMessage(record)));
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
  // the structured log at debug so stderr stays one record per line.
  const grpcLog = getLogger(["bigfleet", "grpc-js"]);
  grpc.setLogger({
    error: (...args: unknown[]) => grpcLog.debug(args.map(String).join(" ")),
    info: (...args: unknown[]) => grpcLog.debug(args.map(String).join(" ")),
    debug: (...args: unknown[]) => grpcLog.debug(args.map(String).join(" ")),
  } as Partial<Console>);
}

/** The level as the JSON lines print it: WARN, not WARNING. */
function levelName(record: LogRecord): string {
  return record.level === "warning" ? "WARN" : record.level.toUpperCase();
}

/**
 * `2026-01-02T03:04:05.678Z WARN  bigfleet.kit: message key=value …`: the
 * JSON line's fields in reading order. A value that is not a plain token is
 * JSON-quoted, so control characters and spaces can never fake a field or
 * a line.
 */
function textLine(record: LogRecord): string {
  let line = `${new Date(record.timestamp).toISOString()} ${levelName(record).padEnd(5)} ` +
    `${record.category.join(".")}: ${quoteUnlessPlain(String(record.message[0]), true)}`;
  for (const [key, value] of Object.entries(record.properties)) {
    line += ` ${key}=${fieldText(value)}`;
  }
  return line + "\n";
}

function fieldText(value: unknown): string {
  if (typeof value === "string") return quoteUnlessPlain(value, false);
  if (typeof value === "bigint") return value.toString();
  return JSON.stringify(value) ?? String(value);
}

/** Printable text stays as it is (with spaces only in the message); anything else is JSON-quoted. */
function quoteUnlessPlain(text: string, spaces: boolean): string {
  const plain = spaces ? /^[^\p{Cc}]*$/u : /^[^\p{Cc}\s"=]+$/u;
  return plain.test(text) ? text : JSON.stringify(text);
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
