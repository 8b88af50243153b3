// Runs deploy/host-setup/setup-token.sh against stub pveum/pvesh that record
// every call (no Proxmox node needed), and turns the ACLs it wrote into the
// simulator's ACL model: shared by the script's own tests and by preflight's,
// which check that what the script grants is what the provider needs.

import { ROOT } from "./helm_helpers.ts";
import type { SimAcl, SimAclEntry } from "../pvesim/mod.ts";

export const SETUP = `${ROOT}deploy/host-setup/setup-token.sh`;
export const SECRET = "11111111-2222-3333-4444-555555555555";

export async function run(cmd: string, args: string[], env: Record<string, string> = {}) {
  const out = await new Deno.Command(cmd, { args, env, stdout: "piped", stderr: "piped" })
    .output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

// Built-in role lists as PVE 8 and PVE 9 print them (abridged to what matters).
export const ROLES_PVE8 =
  '[{"roleid":"Administrator","special":1,"privs":"SDN.Use,VM.Allocate,VM.Audit,VM.Monitor,VM.Clone"}]';
export const ROLES_PVE9 = '[{"roleid":"Administrator","special":1,"privs":' +
  '"SDN.Use,VM.Allocate,VM.Audit,VM.GuestAgent.Audit,VM.GuestAgent.FileWrite,VM.GuestAgent.Unrestricted"}]';

export interface Cluster {
  roles: string;
  users?: string;
  pools?: string;
  tokens?: string;
  /** What the stub `pveversion` prints (default nothing: no version hint), so a real
   * `pveversion` on the test host (e.g. a Proxmox rig's) is never consulted. */
  pveversion?: string;
  /** What `pvesh get /cluster/resources --type vm` prints (default: no guests). */
  resources?: string;
  /** What `pvesh get /nodes/<node>/qemu/<vmid>/config` prints, by `<node>/<vmid>`. */
  configs?: Record<string, string>;
}

/** Runs setup-token.sh with stub pveum/pvesh (and `env`); returns its output and the pveum calls. */
export async function setupToken(
  cluster: Cluster,
  args: string[] = [],
  env: Record<string, string> = {},
) {
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/roles.json`, cluster.roles);
    await Deno.writeTextFile(`${dir}/users.json`, cluster.users ?? "[]");
    await Deno.writeTextFile(`${dir}/pools.json`, cluster.pools ?? "[]");
    await Deno.writeTextFile(`${dir}/tokens.json`, cluster.tokens ?? "[]");
    const stub = `#!/bin/sh
echo "$*" >> "${dir}/calls"
case "$1 $2 $3" in
"role list "*) cat "${dir}/roles.json" ;;
"user list "*) cat "${dir}/users.json" ;;
"pool list "*) cat "${dir}/pools.json" ;;
"user token list") cat "${dir}/tokens.json" ;;
"user token add") echo '{"full-tokenid":"x","info":{"privsep":"1"},"value":"${SECRET}"}' ;;
esac
`;
    await Deno.writeTextFile(`${dir}/pveum`, stub);
    await Deno.writeTextFile(`${dir}/resources.json`, cluster.resources ?? "[]");
    for (const [at, config] of Object.entries(cluster.configs ?? {})) {
      await Deno.writeTextFile(`${dir}/config-${at.replace("/", "-")}.json`, config);
    }
    // Reads only: /cluster/resources and a VM's config, from the files above.
    await Deno.writeTextFile(
      `${dir}/pvesh`,
      `#!/bin/sh
[ "$1" = get ] || exit 0
case "$2" in
/cluster/resources) cat "${dir}/resources.json" ;;
/nodes/*/qemu/*/config)
  f="${dir}/config-$(echo "$2" | sed 's|^/nodes/\\([^/]*\\)/qemu/\\([0-9]*\\)/config$|\\1-\\2|').json"
  if [ -f "$f" ]; then cat "$f"; else echo "Configuration file does not exist" >&2; exit 2; fi ;;
esac
`,
    );
    await Deno.writeTextFile(`${dir}/pveversion.out`, cluster.pveversion ?? "");
    await Deno.writeTextFile(`${dir}/pveversion`, `#!/bin/sh\ncat "${dir}/pveversion.out"\n`);
    await Deno.chmod(`${dir}/pveum`, 0o755);
    await Deno.chmod(`${dir}/pvesh`, 0o755);
    await Deno.chmod(`${dir}/pveversion`, 0o755);
    const res = await run("sh", [SETUP, ...args], {
      PVE_NODE_DIR: `${dir}/no-node`,
      ...env,
      PATH: `${dir}:${Deno.env.get("PATH")}`,
    });
    let calls: string[] = [];
    try {
      calls = (await Deno.readTextFile(`${dir}/calls`)).trim().split("\n");
    } catch { /* no calls */ }
    return { ...res, calls, mutations: calls.filter((c) => !/ list( |$)/.test(c)) };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** The ACLs a run of setup-token.sh wrote, as the simulator's ACL model takes them. */
export function aclOf(mutations: string[]): SimAcl {
  const roles = new Map<string, string[]>();
  const entries: SimAclEntry[] = [];
  for (const c of mutations) {
    const role = /^role (?:add|modify) (\S+) --privs (\S+)$/.exec(c);
    if (role) roles.set(role[1], role[2].split(","));
    const acl = /^acl modify (\S+) --(users|tokens) \S+ --roles (\S+) --propagate ([01])$/.exec(c);
    if (acl) {
      entries.push({
        path: acl[1],
        privs: roles.get(acl[3]) ?? [],
        propagate: acl[4] === "1",
        ugid: acl[2] === "users" ? "user" : "token",
      });
    }
  }
  return { entries };
}
