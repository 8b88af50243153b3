// Help text generated from the commands and their flag tables, so the flags a
// command accepts and the flags its help lists cannot drift apart.

import type { FlagSpec, FlagTable } from "../config/flags.ts";
import { type Command, PROGRAM } from "./command.ts";

const WIDTH = 100;
const NBSP = "\u00a0";

/** How a default reads in help: Go-style quoted strings, bare booleans. */
export function defaultText(spec: FlagSpec): string {
  if (spec.kind === "bool") return `(default ${spec.default})`;
  if (spec.default === "") return `(default: ${spec.none ?? "empty"})`;
  return `(default ${JSON.stringify(spec.default)})`;
}

interface Row {
  names: string;
  text: string;
}

function flagRow(name: string, spec: FlagSpec, aliased: boolean): Row {
  const value = spec.kind === "bool" ? "" : ` ${spec.arg ?? "VALUE"}`;
  const prefix = spec.short ? `-${spec.short}, ` : aliased ? "    " : "";
  // The default never breaks across lines (NBSP until printed).
  const tail = defaultText(spec).replaceAll(" ", NBSP);
  return { names: `${prefix}--${name}${value}`, text: `${spec.help} ${tail}` };
}

/** Two columns, the second wrapped at WIDTH and aligned under itself. */
function rows(list: Row[], col = Math.max(...list.map((r) => r.names.length)) + 4): string[] {
  const out: string[] = [];
  for (const r of list) {
    const words = r.text.split(" ");
    let line = `  ${r.names}`.padEnd(col);
    let fresh = true;
    for (const w of words) {
      if (!fresh && line.length + 1 + w.length > WIDTH) {
        out.push(line);
        line = " ".repeat(col);
        fresh = true;
      }
      line += fresh ? w : ` ${w}`;
      fresh = false;
    }
    out.push(line);
  }
  return out.map((l) => l.replaceAll(NBSP, " "));
}

/** A flag table grouped by topic, topics in first-seen order. */
export function flagSections(table: FlagTable, general: Row[]): string[] {
  const aliased = Object.values(table).some((s) => s.short);
  const topics = new Map<string, Row[]>();
  for (const [name, spec] of Object.entries(table)) {
    const list = topics.get(spec.topic) ?? [];
    list.push(flagRow(name, spec, aliased));
    topics.set(spec.topic, list);
  }
  topics.set("General", [...(topics.get("General") ?? []), ...general]);
  // One alignment for every topic, so the help reads as one table.
  const col = Math.max(...[...topics.values()].flat().map((r) => r.names.length)) + 4;
  const out: string[] = [];
  for (const [topic, list] of topics) out.push("", `${topic}:`, ...rows(list, col));
  return out;
}

/** The help of `cmd`; its usage line follows `program` (the binary's name by default). */
export function helpText(cmd: Command, extraGeneral: Row[] = [], program = PROGRAM): string {
  const out = [`Usage: ${program} ${cmd.usage}`];
  if (cmd.description) out.push("", cmd.description);
  if (cmd.subcommands?.length) {
    out.push(
      "",
      "Commands:",
      ...rows(cmd.subcommands.map((c) => ({ names: c.name, text: c.summary }))),
    );
  }
  const general = [{ names: "-h, --help", text: "print this help and exit" }, ...extraGeneral];
  out.push(...flagSections(cmd.flags ?? {}, general));
  if (cmd.footer) out.push("", cmd.footer);
  return out.join("\n") + "\n";
}
