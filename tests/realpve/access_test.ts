// The least-privilege path on the real PVE: deploy/host-setup/setup-token.sh
// run inside the rig in each of its modes makes the user, roles (the rig's
// version's privilege names), pool, ACLs and privilege-separated token it promises;
// `preflight` (the real entrypoint) passes with that token, and fails naming
// the fix once a privilege is taken from the role.

import assert from "node:assert/strict";
import { cli } from "../cli/helpers.ts";
import { laneIdentity, type Mode, providerFlags } from "./lane.ts";
import { laneTest, pveMajor, run } from "./rig.ts";

/**
 * The provisioner role setup-token.sh makes: the guest-agent privileges are
 * `VM.Monitor` on PVE 8 and `VM.GuestAgent.*` on PVE 9, which has no VM.Monitor.
 */
async function provisioner(): Promise<string> {
  const agent = (await pveMajor()) >= 9
    ? "VM.GuestAgent.Audit,VM.GuestAgent.Unrestricted"
    : "VM.Monitor";
  return `VM.Allocate,VM.Audit,VM.Config.CPU,VM.Config.Memory,VM.Config.Options,${agent},` +
    "VM.PowerMgmt,Pool.Audit";
}

const sorted = (privs: string) => privs.split(",").sort().join(",");

/**
 * What PVE stored, read from /etc/pve/user.cfg (each pveum list costs seconds
 * of Perl start-up): users, tokens (`token:<id>:<expire>:<privsep>:…`), roles,
 * pools and ACLs (`acl:<propagate>:<path>:<users and tokens>:<roles>:`).
 */
async function userCfg() {
  const rows = (await run("cat", "/etc/pve/user.cfg")).split("\n").map((l) => l.split(":"));
  return {
    users: rows.filter((r) => r[0] === "user").map((r) => r[1]),
    tokens: rows.filter((r) => r[0] === "token").map((r) => ({ id: r[1], privsep: r[3] })),
    pools: rows.filter((r) => r[0] === "pool").map((r) => r[1]),
    role(id: string): string | undefined {
      const r = rows.find((x) => x[0] === "role" && x[1] === id);
      return r === undefined ? undefined : sorted(r[2]);
    },
    /** `path role propagate` of every ACL entry naming `ugid`, sorted. */
    acls(ugid: string): string[] {
      return rows.filter((r) => r[0] === "acl" && r[3].split(",").includes(ugid))
        .flatMap((r) => r[4].split(",").map((role) => `${r[2]} ${role} ${r[1]}`)).sort();
    },
  };
}

async function preflight(mode: Mode) {
  const id = await laneIdentity(mode);
  return await cli(["preflight", ...await providerFlags(id)], { timeoutMs: 90_000 });
}

const EXPECTED: Record<Mode, (p: string, pool: string) => string[]> = {
  "default": (p, pool) => [
    `/pool/${pool} ${p}Provisioner 1`,
    `/sdn/zones/localnetwork/vmbr0 ${p}Network 1`,
    `/storage/local ${p}Storage 0`,
    `/vms ${p}Auditor 1`,
    `/vms/9100 ${p}TemplateCloner 0`,
  ],
  "vlan-tags": (p, pool) => [
    `/pool/${pool} ${p}Provisioner 1`,
    `/sdn/zones/localnetwork/vmbr0 ${p}Network 0`,
    `/sdn/zones/localnetwork/vmbr0/10 ${p}Network 0`,
    `/sdn/zones/localnetwork/vmbr0/20 ${p}Network 0`,
    `/storage/local ${p}Storage 0`,
    `/vms ${p}Auditor 1`,
    `/vms/9100 ${p}TemplateCloner 0`,
  ],
  "no-audit-all-vms": (p, pool) => [
    `/pool/${pool} ${p}Provisioner 1`,
    `/sdn/zones/localnetwork/vmbr0 ${p}Network 1`,
    `/storage/local ${p}Storage 0`,
    `/vms/9100 ${p}TemplateCloner 0`,
  ],
};

for (const mode of ["default", "vlan-tags", "no-audit-all-vms"] as const) {
  laneTest(
    `setup-token.sh ${mode}: user, the version's roles, pool, ACLs on user and token, privsep token; preflight passes`,
    async () => {
      const id = await laneIdentity(mode, { fresh: true });
      const cfg = await userCfg();
      assert.ok(cfg.users.includes(id.user), `user ${id.user} exists`);
      assert.deepEqual(
        cfg.tokens.filter((t) => t.id === id.tokenId),
        [{ id: id.tokenId, privsep: "1" }],
        "one privilege-separated token",
      );
      assert.ok(cfg.pools.includes(id.pool), `pool ${id.pool} exists`);
      assert.equal(
        cfg.role(`${id.prefix}Provisioner`),
        sorted(await provisioner()),
        `PVE ${await pveMajor()} names`,
      );
      assert.equal(cfg.role(`${id.prefix}TemplateCloner`), "VM.Audit,VM.Clone");
      assert.equal(cfg.role(`${id.prefix}Storage`), "Datastore.AllocateSpace,Datastore.Audit");
      assert.equal(cfg.role(`${id.prefix}Network`), "SDN.Use");
      assert.equal(
        cfg.role(`${id.prefix}Auditor`),
        mode === "no-audit-all-vms" ? undefined : "VM.Audit",
      );
      const want = EXPECTED[mode](id.prefix, id.pool).sort();
      assert.deepEqual(cfg.acls(id.tokenId), want, "the token's ACLs");
      assert.deepEqual(
        cfg.acls(id.user),
        want,
        "the user's (privsep: the token gets the intersection)",
      );

      assert.match(id.output, /token id \(proxmox\.tokenID\): bflane[a-z-]*@pve!lane/);
      const r = await preflight(mode);
      assert.equal(r.code, 0, `preflight with the ${mode} token:\n${r.stdout}${r.stderr}`);
      assert.doesNotMatch(r.stdout, /^FAIL/m);
      assert.ok(
        !r.stdout.includes(id.secret) && !r.stderr.includes(id.secret),
        "no secret printed",
      );
    },
  );
}

laneTest("preflight FAILs naming the fix when the role loses a privilege", async () => {
  const id = await laneIdentity("default");
  const role = `${id.prefix}Provisioner`;
  const all = await provisioner();
  const without = all.split(",").filter((p) => p !== "VM.PowerMgmt").join(",");
  await run("pveum", "role", "modify", role, "--privs", without);
  try {
    const r = await preflight("default");
    assert.equal(r.code, 1, `preflight must fail:\n${r.stdout}${r.stderr}`);
    const fail = r.stdout.split("\n").filter((l) => /^FAIL/.test(l));
    assert.ok(fail.some((l) => l.includes("VM.PowerMgmt")), `a FAIL names it:\n${r.stdout}`);
    assert.match(r.stdout, /fix: .*VM\.PowerMgmt/i);
  } finally {
    await run("pveum", "role", "modify", role, "--privs", all);
  }
  const ok = await preflight("default");
  assert.equal(ok.code, 0, `preflight with the privilege back:\n${ok.stdout}${ok.stderr}`);
});
