// `version` and `--version`: what build this is, for bug reports and fleet
// inventories (the same facts as the bigfleet_proxmox_build_info gauge).

import { buildInfo } from "../version.ts";
import {
  type Command,
  EXIT_OK,
  EXIT_USAGE,
  fail,
  parseCommandArgs,
  PROGRAM,
  write,
} from "./command.ts";

/** The lines `--version` prints. */
export function versionText(): string {
  const b = buildInfo();
  return [
    `${PROGRAM} ${b.version}`,
    `commit:     ${b.commit}`,
    `deno:       ${b.deno}`,
    `v8:         ${b.v8}`,
    `typescript: ${b.typescript}`,
  ].join("\n") + "\n";
}

const FLAGS = {
  output: {
    kind: "string",
    default: "text",
    topic: "Output",
    short: "o",
    arg: "FORMAT",
    help: "text or json",
  },
} as const;

export const version: Command = {
  name: "version",
  summary: "print the version, the commit and the Deno, V8 and TypeScript versions",
  usage: "version [-o text|json]",
  flags: FLAGS,
  run(args, ctx) {
    const p = parseCommandArgs(FLAGS, args, ctx);
    if (typeof p === "number") return Promise.resolve(p);
    const format = p.values.output;
    if (format === "json") {
      console.log(JSON.stringify(buildInfo(), null, 2));
    } else if (format === "text") {
      write(versionText());
    } else {
      return Promise.resolve(
        fail(`--output: want text or json, got ${JSON.stringify(format)}`, EXIT_USAGE),
      );
    }
    return Promise.resolve(EXIT_OK);
  },
};
