// Shared helpers for the deploy tests: locate the repo, find and run a real
// helm, and parse what it renders.

// Inline specifier: only the deploy tests need a YAML parser, and deno.json
// belongs to the whole project (move it to "imports" if others need yaml too).
import { parseAllDocuments } from "yaml";

export const ROOT = new URL("../../", import.meta.url).pathname;
export const CHART = `${ROOT}deploy/helm`;
export const EXAMPLES = `${ROOT}deploy/examples`;

// deno-lint-ignore no-explicit-any
export type Manifest = Record<string, any>;

async function output(cmd: string, args: string[]): Promise<string | null> {
  try {
    const out = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "null" }).output();
    return out.success ? new TextDecoder().decode(out.stdout).trim() : null;
  } catch {
    return null; // not installed
  }
}

async function isFile(path: string): Promise<boolean> {
  try {
    return (await Deno.stat(path)).isFile;
  } catch {
    return false;
  }
}

let helmPath: Promise<string> | undefined;

/** helm from $HELM, PATH, or `go install`'s bin dir; throws when there is none. */
export function findHelm(): Promise<string> {
  helmPath ??= (async () => {
    const fromEnv = Deno.env.get("HELM");
    if (fromEnv && await isFile(fromEnv)) return fromEnv;
    if (await output("helm", ["version", "--short"]) !== null) return "helm";
    const gobin = await output("go", ["env", "GOBIN"]) ||
      `${await output("go", ["env", "GOPATH"]) ?? `${Deno.env.get("HOME")}/go`}/bin`;
    if (await isFile(`${gobin}/helm`)) return `${gobin}/helm`;
    throw new Error(
      "helm not found (looked at $HELM, PATH and $(go env GOPATH)/bin/helm): " +
        "run `sh deploy/install-helm.sh` first (CI installs it the same way)",
    );
  })();
  return helmPath;
}

export interface HelmResult {
  ok: boolean;
  stdout: string;
  stderr: string;
}

export async function helm(args: string[]): Promise<HelmResult> {
  const out = await new Deno.Command(await findHelm(), {
    args,
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { ok: out.success, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

export const RELEASE = "bigfleet-proxmox-dc1";
export const NAMESPACE = "bigfleet";

/** `helm template` the chart; `args` are extra flags (-f, --set, --set-file). */
export async function template(args: string[]): Promise<HelmResult> {
  return await helm(["template", RELEASE, CHART, "--namespace", NAMESPACE, ...args]);
}

/** Render and parse; throws with helm's stderr when rendering fails. */
export async function render(args: string[]): Promise<Manifest[]> {
  const res = await template(args);
  if (!res.ok) throw new Error(`helm template ${args.join(" ")} failed:\n${res.stderr}`);
  return parseManifests(res.stdout);
}

export function parseManifests(text: string): Manifest[] {
  // Kubernetes reads manifests as YAML 1.1 (e.g. defaultMode: 0440 is octal).
  return parseAllDocuments(text, { version: "1.1" })
    .map((doc) => {
      if (doc.errors.length > 0) throw new Error(`bad YAML from helm: ${doc.errors[0].message}`);
      return doc.toJS() as Manifest | null;
    })
    .filter((m): m is Manifest => m !== null);
}

/** The one manifest of `kind` (and name suffix, when given); throws otherwise. */
export function one(manifests: Manifest[], kind: string, nameSuffix = ""): Manifest {
  const found = manifests.filter((m) =>
    m.kind === kind && String(m.metadata?.name ?? "").endsWith(nameSuffix)
  );
  if (found.length !== 1) {
    throw new Error(
      `expected one ${kind}${nameSuffix ? ` *${nameSuffix}` : ""}, got ${found.length}`,
    );
  }
  return found[0];
}

export function kinds(manifests: Manifest[]): string[] {
  return manifests.map((m) => `${m.kind}/${m.metadata.name}`).sort();
}
