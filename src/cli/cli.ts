// The binary's command dispatch. Flags alone (or `serve`) run the provider, as
// every deployment already invokes it; a first argument that is not a flag
// names a command. A command is one module exporting a Command (command.ts);
// adding one is adding it to COMMANDS (docs/cli.md#adding-a-command).

import { nearest } from "../config/flags.ts";
import { type Command, type Context, EXIT_OK, EXIT_USAGE, fail, write } from "./command.ts";
import { helpText } from "./help.ts";
import { completion } from "./completion.ts";
import { machines } from "./machines.ts";
import { preflight } from "./preflight.ts";
import { serve } from "./serve.ts";
import { stateCommand } from "./state_cmd.ts";
import { smoke } from "./smoke.ts";
import { version } from "./version_cmd.ts";

const helpCommand: Command = {
  name: "help",
  summary: 'print help for a command, e.g. "help machines list"',
  usage: "help [command [subcommand]]",
};

export const COMMANDS: readonly Command[] = [
  serve,
  preflight,
  smoke,
  machines,
  stateCommand,
  completion,
  version,
  helpCommand,
];

/** The top level: serving's flags plus the command list. */
const ROOT: Command = { ...serve, subcommands: COMMANDS };

const HELP_ARGS = new Set(["-h", "--h", "-help", "--help"]);
const VERSION_ROW = [{ names: "--version", text: "print the version and exit" }];

function printer(cmd: Command): Context {
  const extra = cmd === ROOT ? VERSION_ROW : [];
  return { printHelp: () => write(helpText(cmd, extra)), root: ROOT };
}

/** `a, b and c` (or `a, b or c`). */
function listed(names: readonly string[], last = "and"): string {
  return names.length < 2
    ? names.join("")
    : `${names.slice(0, -1).join(", ")} ${last} ${names.at(-1)}`;
}

/** Find `path` (e.g. ["machines", "list"]); a miss is a usage error naming the nearest and the rest. */
function resolve(path: readonly string[]): Command | number {
  let here: Command = ROOT;
  const walked: string[] = [];
  for (const name of path) {
    const subs = here.subcommands ?? [];
    const next = subs.find((c) => c.name === name);
    walked.push(name);
    if (!next) {
      const names = subs.map((c) => c.name);
      const hint = nearest(name, names);
      const prefix = walked.slice(0, -1).join(" ");
      const full = (n: string) => (prefix ? `${prefix} ${n}` : n);
      return fail(
        `unknown command "${full(name)}"${hint ? ` (did you mean "${full(hint)}"?)` : ""}; ` +
          `the commands${prefix ? ` of ${prefix}` : ""} are ${listed(names)}`,
        EXIT_USAGE,
      );
    }
    // serve's help is the top level's.
    here = next === serve ? ROOT : next;
  }
  return here;
}

/** Run the command line; resolves to the process exit code. */
export async function runCli(argv: readonly string[]): Promise<number> {
  if (argv.length === 0 || argv[0].startsWith("-")) {
    return await serve.run!([...argv], printer(ROOT));
  }
  if (argv[0] === "help") {
    const cmd = resolve(argv.slice(1));
    if (typeof cmd === "number") return cmd;
    printer(cmd).printHelp();
    return EXIT_OK;
  }
  // Walk down while the command found is a group (machines): its next argument names one of
  // its commands.
  const path: string[] = [];
  const rest = [...argv];
  let cmd: Command = ROOT;
  do {
    if (path.length > 0 && rest.length > 0 && HELP_ARGS.has(rest[0])) {
      printer(cmd).printHelp();
      return EXIT_OK;
    }
    if (rest.length === 0 || rest[0].startsWith("-")) {
      const names = (cmd.subcommands ?? []).map((c) => c.name);
      return fail(`${path.join(" ")} needs a command: ${listed(names, "or")}`, EXIT_USAGE);
    }
    path.push(rest.shift()!);
    const found = resolve(path);
    if (typeof found === "number") return found;
    cmd = found;
  } while (cmd.subcommands && cmd !== ROOT);
  return await (cmd === ROOT ? serve : cmd).run!(rest, printer(cmd));
}
