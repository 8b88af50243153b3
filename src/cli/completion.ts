// `completion bash|zsh|fish`: a shell completion script generated from the
// same command tree and flag tables as --help (help.ts), so what the shell
// offers is exactly what the binary accepts. Each script finds the command
// path typed so far (words that name a command, flags skipped), then offers
// that command's subcommands or fixed arguments, or its flags after a dash,
// and files after a flag that takes a value.

import type { FlagSpec } from "../config/flags.ts";
import {
  type Command,
  type Context,
  EXIT_OK,
  EXIT_USAGE,
  fail,
  PROGRAM,
  write,
} from "./command.ts";

const SHELLS = ["bash", "zsh", "fish"] as const;
type Shell = typeof SHELLS[number];

export const completion: Command = {
  name: "completion",
  summary: "print a shell completion script: completion bash|zsh|fish",
  usage: "completion bash|zsh|fish",
  description: "Prints a script that completes this program's commands, arguments and flags.",
  choices: SHELLS,
  footer: "Load it from the shell's start-up file:\n" +
    `  bash: source <(${PROGRAM} completion bash)            (in ~/.bashrc)\n` +
    `  zsh:  source <(${PROGRAM} completion zsh)             (in ~/.zshrc, after compinit)\n` +
    `  fish: ${PROGRAM} completion fish | source             (in ~/.config/fish/config.fish)`,
  run: runCompletion,
};

function runCompletion(args: string[], ctx: Context): Promise<number> {
  if (args.length === 1 && ["-h", "--h", "-help", "--help"].includes(args[0])) {
    ctx.printHelp();
    return Promise.resolve(EXIT_OK);
  }
  const shell = SHELLS.find((s) => s === args[0]);
  if (args.length !== 1 || shell === undefined) {
    const got = args.length === 0 ? "nothing" : JSON.stringify(args.join(" "));
    return Promise.resolve(
      fail(`completion takes one shell: bash, zsh or fish (got ${got})`, EXIT_USAGE),
    );
  }
  write(completionScript(shell, ctx.root));
  return Promise.resolve(EXIT_OK);
}

/** One flag as the shells offer it. */
export interface FlagWord {
  name: string;
  short?: string;
  /** Takes a value (a string flag): the next word is not a command. */
  valued: boolean;
  help: string;
}

/** One command path ("" is the top level) and what may follow it. */
export interface CompletionNode {
  path: string;
  /** Subcommand names, or the fixed values of its argument, with one line each. */
  words: { name: string; help: string }[];
  flags: FlagWord[];
}

const HELP_FLAG: FlagWord = {
  name: "help",
  short: "h",
  valued: false,
  help: "print help and exit",
};
const VERSION_FLAG: FlagWord = {
  name: "version",
  valued: false,
  help: "print the version and exit",
};

/** Every command path of the tree under `root` (the top level first), with its words and flags. */
export function completionNodes(root: Command): CompletionNode[] {
  const nodes: CompletionNode[] = [];
  const visit = (cmd: Command, path: string, top: boolean) => {
    const flags: FlagWord[] = Object.entries(cmd.flags ?? {}).map((
      [name, spec]: [string, FlagSpec],
    ) => ({
      name,
      short: spec.short,
      valued: spec.kind === "string",
      help: spec.help,
    }));
    flags.push(HELP_FLAG);
    if (top) flags.push(VERSION_FLAG);
    const subs = (cmd.subcommands ?? []).filter((c) => c !== cmd);
    const words = [
      ...subs.map((c) => ({ name: c.name, help: c.summary })),
      ...(cmd.choices ?? []).map((name) => ({ name, help: `${cmd.name} ${name}` })),
    ];
    nodes.push({ path, words, flags });
    for (const sub of subs) visit(sub, path === "" ? sub.name : `${path} ${sub.name}`, false);
  };
  visit(root, "", true);
  return nodes;
}

/** The completion script of `shell` for the tree under `root`. */
export function completionScript(shell: Shell, root: Command): string {
  const nodes = completionNodes(root);
  switch (shell) {
    case "bash":
      return bashScript(nodes);
    case "zsh":
      return zshScript(nodes);
    case "fish":
      return fishScript(nodes);
  }
}

const FN = `_${PROGRAM.replaceAll("-", "_")}`;

/** Single-quoted for sh-like shells (bash, zsh, fish all read '…' literally, fish also `\\'`). */
function sq(text: string): string {
  return `'${text.replaceAll("'", `'\\''`)}'`;
}

function flagNames(f: FlagWord): string[] {
  return [`--${f.name}`, ...(f.short ? [`-${f.short}`] : [])];
}

/** The loop that finds the command path in the words before the cursor (bash and zsh agree on it). */
function pathLoop(nodes: CompletionNode[], from: string, to: string, word: string): string {
  const known = nodes.filter((n) => n.path !== "").map((n) => sq(n.path)).join("|");
  return [
    `  local cpath="" word i`,
    `  for ((i = ${from}; i < ${to}; i++)); do`,
    `    word=${word}`,
    `    case "$word" in -*) continue ;; esac`,
    `    case "\${cpath:+$cpath }$word" in`,
    `      ${known}) cpath="\${cpath:+$cpath }$word" ;;`,
    `    esac`,
    `  done`,
  ].join("\n");
}

function bashScript(nodes: CompletionNode[]): string {
  const cases = nodes.map((n) => {
    const words = n.words.map((w) => w.name).join(" ");
    const flags = n.flags.flatMap(flagNames).join(" ");
    const valued = n.flags.filter((f) => f.valued).flatMap(flagNames).join(" ");
    return `    ${sq(n.path)})\n      subs=${sq(words)}\n      flags=${sq(flags)}\n      valued=${
      sq(valued)
    }\n      ;;`;
  });
  return [
    `# bash completion for ${PROGRAM}, generated by \`${PROGRAM} completion bash\`.`,
    `# Load it in ~/.bashrc:  source <(${PROGRAM} completion bash)`,
    `${FN}() {`,
    `  local cur=\${COMP_WORDS[COMP_CWORD]} prev=\${COMP_WORDS[COMP_CWORD-1]}`,
    pathLoop(nodes, "1", "COMP_CWORD", "${COMP_WORDS[i]}"),
    `  local subs="" flags="" valued=""`,
    `  case "$cpath" in`,
    ...cases,
    `  esac`,
    `  COMPREPLY=()`,
    `  # After a flag that takes a value: leave it to the default (file names).`,
    `  case " $valued " in *" $prev "*) return ;; esac`,
    `  if [[ $cur == -* ]]; then`,
    `    mapfile -t COMPREPLY < <(compgen -W "$flags" -- "$cur")`,
    `  else`,
    `    mapfile -t COMPREPLY < <(compgen -W "$subs" -- "$cur")`,
    `  fi`,
    `}`,
    `complete -o default -F ${FN} ${PROGRAM}`,
    "",
  ].join("\n");
}

function zshScript(nodes: CompletionNode[]): string {
  // _describe takes `name:description`; a colon in the name would need escaping (names have none).
  const item = (name: string, help: string) => sq(`${name}:${help}`);
  const cases = nodes.map((n) => {
    const words = n.words.map((w) => item(w.name, w.help)).join(" ");
    const flags = n.flags.flatMap((f) => flagNames(f).map((name) => item(name, f.help))).join(" ");
    const valued = n.flags.filter((f) => f.valued).flatMap(flagNames).join(" ");
    return `    ${
      sq(n.path)
    })\n      subs=(${words})\n      flags=(${flags})\n      valued=(${valued})\n      ;;`;
  });
  return [
    `#compdef ${PROGRAM}`,
    `# zsh completion for ${PROGRAM}, generated by \`${PROGRAM} completion zsh\`.`,
    `# Load it in ~/.zshrc, after compinit:  source <(${PROGRAM} completion zsh)`,
    `${FN}() {`,
    pathLoop(nodes, "2", "CURRENT", "${words[i]}"),
    `  local -a subs flags valued`,
    `  case "$cpath" in`,
    ...cases,
    `  esac`,
    `  # After a flag that takes a value: file names.`,
    `  if (( \${valued[(Ie)\${words[CURRENT-1]}]} )); then _files; return; fi`,
    `  if [[ \${words[CURRENT]} == -* ]]; then`,
    `    _describe -t flags flag flags`,
    `  elif (( \${#subs} )); then`,
    `    _describe -t commands command subs`,
    `  else`,
    `    _files`,
    `  fi`,
    `}`,
    `if (( $+functions[compdef] )); then compdef ${FN} ${PROGRAM}; fi`,
    "",
  ].join("\n");
}

function fishScript(nodes: CompletionNode[]): string {
  const known = nodes.filter((n) => n.path !== "").map((n) => sq(n.path)).join(" ");
  const lines = [
    `# fish completion for ${PROGRAM}, generated by \`${PROGRAM} completion fish\`.`,
    `# Load it in ~/.config/fish/config.fish:  ${PROGRAM} completion fish | source`,
    `function __${FN}_path`,
    `    set -l cpath`,
    `    for word in (commandline -opc)[2..-1]`,
    `        string match -q -- '-*' $word; and continue`,
    `        if contains -- (string join ' ' $cpath $word) ${known}`,
    `            set cpath $cpath $word`,
    `        end`,
    `    end`,
    `    string join ' ' $cpath`,
    `end`,
    `function __${FN}_at`,
    `    set -l cpath (__${FN}_path)`,
    `    test "$cpath" = "$argv[1]"`,
    `end`,
    `complete -c ${PROGRAM} -e`,
  ];
  for (const n of nodes) {
    // Command paths are plain words: they need no quoting inside the condition's quotes.
    const at = `-n "__${FN}_at '${n.path}'"`;
    for (const w of n.words) {
      lines.push(`complete -c ${PROGRAM} ${at} -f -a ${sq(w.name)} -d ${sq(w.help)}`);
    }
    for (const f of n.flags) {
      const short = f.short ? ` -s ${f.short}` : "";
      const value = f.valued ? " -r" : "";
      lines.push(`complete -c ${PROGRAM} ${at} -l ${f.name}${short}${value} -d ${sq(f.help)}`);
    }
  }
  return lines.join("\n") + "\n";
}
