// deploy/host-setup/setup-token.sh and deploy/install-helm.sh: syntax,
// shellcheck when installed, and setup-token.sh run against stub pveum/pvesh
// that record every call (no Proxmox node needed).

import assert from "node:assert/strict";
import { ignoreWithout } from "../harness/tools.ts";
import { ROOT } from "./helm_helpers.ts";
import { rig, signal, slot } from "../proxmox/helpers.ts";
import { aclOf, ROLES_PVE8, ROLES_PVE9, run, SECRET, SETUP, setupToken } from "./setup_token.ts";
import { issueCert, makeCa } from "../pvesim/mod.ts";
import type { InstanceType } from "../../src/config/types.ts";

import { parseTokenFile } from "../../src/config/proxmox.ts";

const SCRIPTS = [SETUP, `${ROOT}deploy/install-helm.sh`];

Deno.test("host scripts: sh -n", async () => {
  for (const script of SCRIPTS) {
    const res = await run("sh", ["-n", script]);
    assert.equal(res.code, 0, `${script}: ${res.stderr}`);
  }
});

const SHELLCHECK_TEST = "host scripts: shellcheck -s sh";

Deno.test({
  name: SHELLCHECK_TEST,
  ignore: ignoreWithout(SHELLCHECK_TEST, "shellcheck", "apt-get install shellcheck"),
  fn: async () => {
    for (const script of SCRIPTS) {
      const res = await run("shellcheck", ["-s", "sh", script]);
      assert.equal(res.code, 0, `${script}:\n${res.stdout}${res.stderr}`);
    }
  },
});

const TOKEN = "bigfleet@pve!autoscaler";
function aclPair(path: string, role: string, propagate: 0 | 1): string[] {
  return [
    `acl modify ${path} --users bigfleet@pve --roles ${role} --propagate ${propagate}`,
    `acl modify ${path} --tokens ${TOKEN} --roles ${role} --propagate ${propagate}`,
  ];
}

Deno.test("setup-token.sh: fresh PVE 9 cluster gets user, scoped roles, pool, privsep token, ACLs", async () => {
  const res = await setupToken({ roles: ROLES_PVE9 });
  assert.equal(res.code, 0, res.stderr);
  assert.deepEqual(res.mutations, [
    "role add BigFleetProvisioner --privs VM.Allocate,VM.Audit,VM.Config.CPU,VM.Config.Memory," +
    "VM.Config.Options,VM.PowerMgmt,VM.GuestAgent.Audit,VM.GuestAgent.Unrestricted,Pool.Audit",
    "role add BigFleetTemplateCloner --privs VM.Clone,VM.Audit",
    "role add BigFleetStorage --privs Datastore.AllocateSpace,Datastore.Audit",
    "role add BigFleetNodeAuditor --privs Sys.Audit",
    "role add BigFleetAuditor --privs VM.Audit",
    "role add BigFleetNetwork --privs SDN.Use",
    "user add bigfleet@pve --comment BigFleet CapacityProvider",
    "pool add bigfleet --comment VMs managed by BigFleet",
    "user token add bigfleet@pve autoscaler --privsep 1 --comment BigFleet CapacityProvider " +
    "--output-format json",
    // Every grant goes to the user and to the token (privsep = intersection).
    ...aclPair("/pool/bigfleet", "BigFleetProvisioner", 1),
    ...aclPair("/vms/9000", "BigFleetTemplateCloner", 0),
    ...aclPair("/storage/local-lvm", "BigFleetStorage", 0),
    // Each node's memory and CPUs (node capacity), read only.
    ...aclPair("/nodes", "BigFleetNodeAuditor", 1),
    // Propagated: template NICs with a VLAN tag need SDN.Use on <bridge>/<tag>.
    ...aclPair("/sdn/zones/localnetwork/vmbr0", "BigFleetNetwork", 1),
    ...aclPair("/vms", "BigFleetAuditor", 1),
  ]);
  // The secret is printed exactly once, with the Secret to put it in.
  assert.equal(res.stdout.split(SECRET).length - 1, 2, "secret line + kubectl line");
  assert.match(res.stdout, /token id \(proxmox\.tokenID\): bigfleet@pve!autoscaler/);
  assert.match(res.stdout, /kubectl -n bigfleet create secret generic bigfleet-proxmox-token/);
  assert.match(res.stdout, /only once/);
  assert.ok(!res.stderr.includes(SECRET), "secret only on stdout");
  assert.ok(!res.calls.some((c) => c.includes("VM.Monitor")), "no PVE 8 privilege on PVE 9");
});

Deno.test("setup-token.sh: re-run on PVE 8 updates roles, keeps user, pool and token secret", async () => {
  const res = await setupToken({
    roles: ROLES_PVE8 + '\n[{"roleid":"BigFleetProvisioner","privs":"VM.Audit"}]',
    users: '[{"userid":"bigfleet@pve","enable":1}]',
    pools: '[{"poolid":"bigfleet"}]',
    tokens: '[{"tokenid":"autoscaler","privsep":1}]',
  }, ["--templates", "9000,9001", "--storages=ceph", "--bridges", "vmbr1,zone1/vnet7"]);
  assert.equal(res.code, 0, res.stderr);
  assert.ok(
    res.mutations.includes(
      "role modify BigFleetProvisioner --privs VM.Allocate,VM.Audit,VM.Config.CPU,VM.Config.Memory," +
        "VM.Config.Options,VM.PowerMgmt,VM.Monitor,Pool.Audit",
    ),
    res.mutations.join("\n"),
  );
  for (const verb of ["user add", "pool add", "token add", "token remove"]) {
    assert.ok(!res.mutations.some((c) => c.includes(verb)), verb);
  }
  for (
    const acl of [
      ...aclPair("/vms/9000", "BigFleetTemplateCloner", 0),
      ...aclPair("/vms/9001", "BigFleetTemplateCloner", 0),
      ...aclPair("/storage/ceph", "BigFleetStorage", 0),
      ...aclPair("/sdn/zones/localnetwork/vmbr1", "BigFleetNetwork", 1),
      ...aclPair("/sdn/zones/zone1/vnet7", "BigFleetNetwork", 1),
    ]
  ) assert.ok(res.mutations.includes(acl), acl);
  assert.ok(!res.stdout.includes(SECRET));
  assert.match(res.stdout, /unchanged; rerun with --rotate/);
});

Deno.test("setup-token.sh: --rotate replaces the token; --dry-run changes nothing", async () => {
  const existing = {
    roles: ROLES_PVE9,
    users: '[{"userid":"bigfleet@pve"}]',
    pools: '[{"poolid":"bigfleet"}]',
    tokens: '[{"tokenid":"autoscaler"}]',
  };
  const rotated = await setupToken(existing, ["--rotate", "--no-audit-all-vms"]);
  assert.equal(rotated.code, 0, rotated.stderr);
  const remove = rotated.mutations.indexOf("user token remove bigfleet@pve autoscaler");
  const add = rotated.mutations.findIndex((c) => c.startsWith("user token add "));
  const firstAcl = rotated.mutations.findIndex((c) => c.startsWith("acl modify"));
  // Removing a token drops its ACLs, so they are granted after the new token exists.
  assert.ok(remove >= 0 && add > remove && firstAcl > add, rotated.mutations.join("\n"));
  assert.ok(!rotated.mutations.some((c) => c.includes("BigFleetAuditor")));
  assert.ok(rotated.stdout.includes(SECRET));

  const dry = await setupToken({ roles: ROLES_PVE9 }, ["--dry-run"]);
  assert.equal(dry.code, 0, dry.stderr);
  assert.deepEqual(dry.mutations, [], "dry run only lists");
  assert.match(dry.stderr, /\+ pveum acl modify \/pool\/bigfleet --tokens bigfleet@pve!autoscaler/);
});

/**
 * Runs the Secret update setup-token.sh prints, against a stub kubectl whose
 * Secret holds `now` as its token; what `create secret` was given.
 */
async function runSecretUpdate(command: string, now: string): Promise<string> {
  const dir = await Deno.makeTempDir();
  try {
    const b64 = btoa(now);
    await Deno.writeTextFile(
      `${dir}/kubectl`,
      `#!/bin/sh
case "$*" in
*"get secret bigfleet-proxmox-token"*) printf '%s' '${b64}' ;;
*"create secret generic bigfleet-proxmox-token"*)
  for a in "$@"; do
    case "$a" in --from-literal=token=*) printf '%s' "\${a#--from-literal=token=}" > "${dir}/written" ;; esac
  done
  echo "kind: Secret" ;;
*"apply -f -"*) cat > /dev/null ;;
*) exit 3 ;;
esac
`,
    );
    await Deno.chmod(`${dir}/kubectl`, 0o755);
    const res = await run("sh", ["-euc", command], { PATH: `${dir}:${Deno.env.get("PATH")}` });
    assert.equal(res.code, 0, res.stderr);
    return await Deno.readTextFile(`${dir}/written`);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("setup-token.sh: --rotate --keep-old adds a token beside the old one; --remove-old retires the rest", async () => {
  const cluster = (tokens: string[]) => ({
    roles: ROLES_PVE9,
    users: '[{"userid":"bigfleet@pve"}]',
    pools: '[{"poolid":"bigfleet"}]',
    tokens: JSON.stringify(tokens.map((tokenid) => ({ tokenid, privsep: 1 }))),
  });
  const kept = await setupToken(cluster(["autoscaler", "other"]), ["--rotate", "--keep-old"]);
  assert.equal(kept.code, 0, kept.stderr);
  const add = kept.mutations.find((c) => c.startsWith("user token add "));
  const name = /^user token add bigfleet@pve (autoscaler-r\d{14}) --privsep 1 /.exec(add ?? "")
    ?.[1];
  assert.ok(name, add ?? "no token add");
  assert.ok(!kept.mutations.some((c) => c.startsWith("user token remove")), "the old one stays");
  // The new token gets every grant the old one has; the old one keeps its own.
  assert.ok(kept.mutations.includes(
    `acl modify /pool/bigfleet --tokens bigfleet@pve!${name} --roles BigFleetProvisioner --propagate 1`,
  ));
  assert.ok(!kept.mutations.some((c) => c.includes("--tokens bigfleet@pve!autoscaler ")));
  // The token file content: the new token's id and secret first, the old token second, so the
  // provider switches ids and still reads the tasks the old one started.
  const out = kept.stdout.split("\n");
  const file = out.indexOf(
    "Token file content: the new token first, the one in use until now second:",
  );
  assert.ok(file >= 0, kept.stdout);
  assert.deepEqual(out.slice(file + 1, file + 3), [
    `  bigfleet@pve!${name}=${SECRET}`,
    "  bigfleet@pve!autoscaler=<the secret your token file holds now>",
  ]);
  assert.match(kept.stdout, new RegExp(`token id \\(proxmox\\.tokenID\\): bigfleet@pve!${name}`));
  // The Secret command, run against a stub kubectl holding the file as it is now (either form).
  const from = out.findIndex((l) => l.startsWith("  old="));
  const command = out.slice(from, from + 4);
  assert.equal(command.length, 4, kept.stdout);
  for (const now of [`bigfleet@pve!autoscaler=old-secret\n`, "old-secret\n"]) {
    const written = await runSecretUpdate(command.join("\n"), now);
    const parsed = parseTokenFile(written);
    assert.equal(parsed.tokenId, `bigfleet@pve!${name}`);
    assert.equal(parsed.secret, SECRET);
    assert.deepEqual(parsed.retiring, [{
      tokenId: "bigfleet@pve!autoscaler",
      secret: "old-secret",
    }]);
  }

  const family = ["autoscaler", "autoscaler-r20261201090000", "autoscaler-r20261202090000"];
  const removed = await setupToken(cluster([...family, "other"]), ["--remove-old"]);
  assert.equal(removed.code, 0, removed.stderr);
  assert.deepEqual(removed.mutations.filter((c) => c.startsWith("user token")), [
    "user token remove bigfleet@pve autoscaler",
    "user token remove bigfleet@pve autoscaler-r20261201090000",
  ], "all but the newest; another family's token is not touched");
  assert.ok(removed.mutations.includes(
    "acl modify /pool/bigfleet --tokens bigfleet@pve!autoscaler-r20261202090000 " +
      "--roles BigFleetProvisioner --propagate 1",
  ));
  assert.ok(!removed.stdout.includes(SECRET), "no new secret");

  // A plain re-run manages the newest of the family.
  const rerun = await setupToken(cluster(family));
  assert.equal(rerun.code, 0, rerun.stderr);
  assert.ok(!rerun.mutations.some((c) => c.startsWith("user token")));
  assert.match(
    rerun.stdout,
    /token id \(proxmox\.tokenID\): bigfleet@pve!autoscaler-r20261202090000/,
  );

  for (const args of [["--keep-old"], ["--rotate", "--remove-old"]]) {
    const bad = await setupToken(cluster(family), args);
    assert.equal(bad.code, 1, args.join(" "));
    assert.deepEqual(bad.mutations, [], `${args.join(" ")}: nothing changed`);
  }
});

Deno.test("setup-token.sh: bad input is refused before anything is changed", async () => {
  for (
    const args of [
      ["--token-name", "9bad"],
      ["--user", "nouser"],
      ["--templates", "42"],
      ["--pool", "bad pool"],
      ["--bogus"],
      ["--pve-major", "x"],
      ["--vlan-tags", "0"],
      ["--vlan-tags", "4095"],
      ["--vlan-tags", "100,abc"],
    ]
  ) {
    const res = await setupToken({ roles: ROLES_PVE9 }, args);
    assert.notEqual(res.code, 0, args.join(" "));
    assert.match(res.stderr, /^setup-token\.sh: /m, args.join(" "));
    assert.deepEqual(res.calls, [], `${args.join(" ")}: no pveum call`);
  }
  // No version hint at all: refuse rather than guess the agent privileges.
  const res = await setupToken({ roles: "[]" });
  assert.notEqual(res.code, 0);
  assert.match(res.stderr, /cannot tell the PVE version/);
});

Deno.test("setup-token.sh: --vlan-tags grants exactly those VLANs of each bridge, not the whole bridge", async () => {
  for (const roles of [ROLES_PVE8, ROLES_PVE9]) {
    const res = await setupToken({ roles }, [
      "--bridges",
      "vmbr0,zone1/vnet7",
      "--vlan-tags",
      "100,200",
    ]);
    assert.equal(res.code, 0, res.stderr);
    const sdn = res.mutations.filter((c) => c.includes("/sdn/"));
    assert.deepEqual(sdn, [
      ...aclPair("/sdn/zones/localnetwork/vmbr0", "BigFleetNetwork", 0),
      ...aclPair("/sdn/zones/localnetwork/vmbr0/100", "BigFleetNetwork", 0),
      ...aclPair("/sdn/zones/localnetwork/vmbr0/200", "BigFleetNetwork", 0),
      ...aclPair("/sdn/zones/zone1/vnet7", "BigFleetNetwork", 0),
      ...aclPair("/sdn/zones/zone1/vnet7/100", "BigFleetNetwork", 0),
      ...aclPair("/sdn/zones/zone1/vnet7/200", "BigFleetNetwork", 0),
    ]);
  }
});

for (const [pve, roles] of [["8", ROLES_PVE8], ["9", ROLES_PVE9]] as const) {
  Deno.test(`setup-token.sh (PVE ${pve}): its ACL lets the provider clone a template whose NIC has a VLAN tag`, async () => {
    for (
      const [args, ok] of [
        [[], true],
        [["--vlan-tags", "100"], true],
        [["--vlan-tags", "200"], false],
      ] as const
    ) {
      // The simulator's template disk is on ceph-vm: clone checks AllocateSpace there.
      const res = await setupToken({ roles }, ["--storages", "ceph-vm", ...args]);
      assert.equal(res.code, 0, res.stderr);
      // The simulator of the same major version: PVE 9 checks the agent's own privileges.
      const pveVersion = pve === "9" ? "9.2.11" : "8.4.1";
      await using r = await rig({ acl: aclOf(res.mutations), pveVersion });
      r.sim.editVmOutOfBand(9000, (c) => {
        c.net0 = `${c.net0},tag=100`;
      });
      const made = await r.backend.create(slot("pve1"), signal()).then(() => null, (e) => e);
      if (ok) assert.equal(made, null, `${args.join(" ")}: ${made}`);
      else {
        assert.match(
          String(made),
          /403 Permission check failed \(\/sdn\/zones\/localnetwork\/vmbr0\/100, SDN\.Use\)/,
        );
      }
    }
  });
}

Deno.test("setup-token.sh: the fingerprint it prints is the served certificate's (pveproxy-ssl.pem over pve-ssl.pem)", async () => {
  const dir = await Deno.makeTempDir({ prefix: "bf-node-" });
  try {
    const cluster = await makeCa(`${dir}/ca`, "cluster");
    const own = await issueCert(cluster, {
      cn: "pve1",
      sans: ["pve1"],
      usage: "server",
      name: "own",
    });
    await Deno.copyFile(own.certFile, `${dir}/pve-ssl.pem`);
    const fingerprintLine = (out: string) => {
      const lines = out.split("\n");
      const i = lines.findIndex((l) => l.includes("SHA-256 fingerprint of the certificate"));
      return lines[i + 2]?.trim();
    };
    let res = await setupToken({ roles: ROLES_PVE9 }, [], { PVE_NODE_DIR: dir });
    assert.equal(res.code, 0, res.stderr);
    assert.equal(fingerprintLine(res.stdout), own.fingerprint, "pve-ssl.pem when nothing else");
    assert.match(res.stdout, /--from-file=ca\.pem=\/etc\/pve\/pve-root-ca\.pem/);
    // A custom (uploaded or ACME) certificate with its key: pveproxy serves that one.
    const acme = await makeCa(`${dir}/acme`, "acme");
    const custom = await issueCert(acme, {
      cn: "pve.example.com",
      sans: ["pve.example.com"],
      usage: "server",
      name: "custom",
    });
    await Deno.copyFile(custom.certFile, `${dir}/pveproxy-ssl.pem`);
    res = await setupToken({ roles: ROLES_PVE9 }, [], { PVE_NODE_DIR: dir });
    assert.equal(fingerprintLine(res.stdout), own.fingerprint, "without its key it is not served");
    await Deno.copyFile(custom.keyFile, `${dir}/pveproxy-ssl.key`);
    res = await setupToken({ roles: ROLES_PVE9 }, [], { PVE_NODE_DIR: dir });
    assert.equal(res.code, 0, res.stderr);
    assert.equal(fingerprintLine(res.stdout), custom.fingerprint);
    assert.notEqual(custom.fingerprint, own.fingerprint);
    assert.match(res.stdout, /the cluster CA did not sign/);
    assert.doesNotMatch(res.stdout, /pve-root-ca\.pem/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("setup-token.sh: with no privilege hint, pveversion's major version picks the privilege names", async () => {
  const res = await setupToken({ roles: "[]", pveversion: "pve-manager/8.4.21/2606ac850d46da29" });
  assert.equal(res.code, 0, res.stderr);
  assert.ok(
    res.mutations.some((c) => c.includes("VM.Monitor")),
    "PVE 8 names the agent VM.Monitor",
  );
});

Deno.test("setup-token.sh (PVE 9): a pool id not starting with a letter is refused before anything is changed; PVE 8 takes it", async () => {
  for (const pool of ["1x", "_pool"]) {
    const res = await setupToken({ roles: ROLES_PVE9 }, ["--pool", pool]);
    assert.equal(res.code, 1, `${pool}: ${res.stderr}`);
    assert.match(
      res.stderr,
      new RegExp(
        `^setup-token\\.sh: --pool must start with a letter on Proxmox VE 9, got '${pool}'`,
        "m",
      ),
    );
    assert.deepEqual(res.mutations, [], `${pool}: nothing changed`);
  }
  const pve8 = await setupToken({ roles: ROLES_PVE8 }, ["--pool", "1x"]);
  assert.equal(pve8.code, 0, pve8.stderr);
  assert.ok(pve8.mutations.includes("pool add 1x --comment VMs managed by BigFleet"));
});

/** A cluster whose templates 9000 (custom model `bigfleet`, with flags) and 9001 (a built-in model) are on pve2. */
const CPU_CLUSTER = {
  resources: '[{"id":"qemu/9000","type":"qemu","vmid":9000,"node":"pve2","template":1},' +
    '{"id":"qemu/9001","type":"qemu","vmid":9001,"node":"pve2","template":1},' +
    '{"id":"qemu/150","type":"lxc","vmid":150,"node":"pve1"}]',
  configs: {
    "pve2/9000": '{"cores":2,"cpu":"custom-bigfleet,flags=+aes","template":1}',
    "pve2/9001": '{"cores":2,"cpu":"x86-64-v2-AES","template":1}',
  },
};

Deno.test("setup-token.sh (PVE 9): a template whose cpu is a custom model gets Mapping.Use on exactly /mapping/cpu/<model>", async () => {
  const res = await setupToken({ roles: ROLES_PVE9, ...CPU_CLUSTER }, ["--templates", "9000,9001"]);
  assert.equal(res.code, 0, res.stderr);
  assert.ok(res.mutations.includes("role add BigFleetCpuModel --privs Mapping.Use"));
  const cpuGrants = res.mutations.filter((c) => c.includes("/mapping/"));
  assert.deepEqual(cpuGrants, aclPair("/mapping/cpu/bigfleet", "BigFleetCpuModel", 0));
  assert.match(res.stderr, /template 9000: custom CPU model 'bigfleet'/);
});

Deno.test("setup-token.sh: no Mapping.Use where no template has a custom model, nor on PVE 8 (no such check at clone time)", async () => {
  const builtIn = await setupToken({ roles: ROLES_PVE9, ...CPU_CLUSTER }, ["--templates", "9001"]);
  assert.equal(builtIn.code, 0, builtIn.stderr);
  assert.ok(!builtIn.mutations.some((c) => c.includes("Mapping.Use") || c.includes("/mapping/")));
  const pve8 = await setupToken({ roles: ROLES_PVE8, ...CPU_CLUSTER }, ["--templates", "9000"]);
  assert.equal(pve8.code, 0, pve8.stderr);
  assert.ok(!pve8.mutations.some((c) => c.includes("Mapping.Use") || c.includes("/mapping/")));
  // A template the cluster does not list yet is said, not fatal.
  const missing = await setupToken({ roles: ROLES_PVE9, ...CPU_CLUSTER }, ["--templates", "9100"]);
  assert.equal(missing.code, 0, missing.stderr);
  assert.match(missing.stderr, /template 9100: not found in the cluster/);
});

Deno.test("setup-token.sh: --resize-disks and --set-network add exactly VM.Config.Disk and VM.Config.Network", async () => {
  const provisioner = (mutations: string[]) =>
    mutations.find((c) => c.startsWith("role add BigFleetProvisioner "))!.split(" --privs ")[1]
      .split(",");
  const plain = await setupToken({ roles: ROLES_PVE9 });
  assert.equal(plain.code, 0, plain.stderr);
  for (const priv of ["VM.Config.Disk", "VM.Config.Network"]) {
    assert.ok(!provisioner(plain.mutations).includes(priv), `${priv} only when asked for`);
  }
  for (
    const [args, env, want] of [
      [["--resize-disks"], {}, ["VM.Config.Disk"]],
      [["--set-network"], {}, ["VM.Config.Network"]],
      [[], { BIGFLEET_RESIZE_DISKS: "1", BIGFLEET_SET_NETWORK: "1" }, [
        "VM.Config.Disk",
        "VM.Config.Network",
      ]],
    ] as const
  ) {
    const res = await setupToken({ roles: ROLES_PVE9 }, [...args], env);
    assert.equal(res.code, 0, res.stderr);
    const added = provisioner(res.mutations).filter((p) =>
      !provisioner(plain.mutations).includes(p)
    );
    assert.deepEqual(added, want, args.join(" "));
  }
});

for (const [pve, roles] of [["8", ROLES_PVE8], ["9", ROLES_PVE9]] as const) {
  Deno.test(`setup-token.sh (PVE ${pve}): with --resize-disks --set-network its ACL lets the provider grow a disk and set a VLAN NIC`, async () => {
    const type: InstanceType = {
      name: "pve.small",
      vcpu: 2,
      memoryMib: 4096,
      template: { kind: "vmid", vmid: 9000 },
      diskGib: 30,
      network: { bridge: "vmbr1", tag: 40 },
    };
    const catalog = new Map([["pve.small", type]]);
    for (
      const [args, fails] of [
        [["--resize-disks", "--set-network", "--bridges", "vmbr0,vmbr1"], null],
        [["--set-network", "--bridges", "vmbr0,vmbr1"], /VM\.Config\.Disk/],
        [["--resize-disks", "--bridges", "vmbr0,vmbr1"], /VM\.Config\.Network/],
        [["--resize-disks", "--set-network"], /\/sdn\/zones\/localnetwork\/vmbr1\/40, SDN\.Use/],
      ] as const
    ) {
      const res = await setupToken({ roles }, ["--storages", "ceph-vm", ...args]);
      assert.equal(res.code, 0, res.stderr);
      await using r = await rig(
        {
          acl: aclOf(res.mutations),
          bridges: { vmbr0: 1500, vmbr1: 1500 },
          pveVersion: pve === "9" ? "9.0.3" : "8.4.1",
        },
        {},
        {},
        { catalog },
      );
      const made = await r.backend.create(slot("pve1"), signal()).then(() => null, (e) => e);
      if (fails === null) {
        assert.equal(made, null, `${args.join(" ")}: ${made}`);
        const vm = r.sim.vms().find((v) => !v.config.template)!;
        assert.match(String(vm.config.scsi0), /size=30G$/);
        assert.match(String(vm.config.net0), /,bridge=vmbr1,tag=40$/);
      } else {
        assert.match(String(made), /403 Permission check failed/, args.join(" "));
        assert.match(String(made), fails, args.join(" "));
      }
    }
  });
}

Deno.test("setup-token.sh (PVE 9): its ACL lets the provider clone a template whose cpu is a custom model (qemu-server 9.1.15+ checks Mapping.Use)", async () => {
  const cluster = (cpu: string) => ({
    roles: ROLES_PVE9,
    resources: '[{"id":"qemu/9000","type":"qemu","vmid":9000,"node":"pve1","template":1}]',
    configs: { "pve1/9000": `{"cpu":"${cpu}","template":1}` },
  });
  for (const [seen, ok] of [["custom-bigfleet", true], ["host", false]] as const) {
    // What the script read of the template decides the grant; the template itself is custom.
    const res = await setupToken(cluster(seen), ["--storages", "ceph-vm"]);
    assert.equal(res.code, 0, res.stderr);
    await using r = await rig({ acl: aclOf(res.mutations), pveVersion: "9.2.11" });
    r.sim.editVmOutOfBand(9000, (c) => {
      c.cpu = "custom-bigfleet";
    });
    const made = await r.backend.create(slot("pve1"), signal()).then(() => null, (e) => e);
    if (ok) assert.equal(made, null, `${seen}: ${made}`);
    else {
      assert.match(
        String(made),
        /403 Permission check failed \(\/mapping\/cpu\/bigfleet, Mapping\.Use\)/,
      );
    }
  }
});
