// `preflight` through the real entrypoint (`deno run … main.ts preflight`)
// against the Proxmox API simulator: every check passing on a cluster set up
// as docs/credentials.md says, each failure with its fix, the JSON and YAML
// shapes, the exit codes, and, from the simulator's request log, that it
// only ever reads (no POST, PUT or DELETE reaches the API; with an untrusted
// certificate no request at all).

import assert from "node:assert/strict";
import { parse as parseYaml } from "yaml";
import {
  RHEL10_GUEST,
  type SimAcl,
  type SimGuest,
  type SimOptions,
  type Simulator,
  startSimulator,
} from "../pvesim/mod.ts";
import { buildDescription } from "../../src/proxmox/naming.ts";
import { aclOf, ROLES_PVE8, ROLES_PVE9, setupToken } from "../deploy/setup_token.ts";
import { providerArgs } from "../proxmox/helpers.ts";
import { cli, type CliResult, lines } from "./helpers.ts";

const GIB = 1024 ** 3;

interface Check {
  check: string;
  subject: string;
  status: "PASS" | "WARN" | "FAIL" | "SKIP";
  message: string;
  fix: string | null;
}

interface JsonReport {
  ok: boolean;
  backend: string;
  api_url: string | null;
  pve_version: string | null;
  summary: { pass: number; warn: number; fail: number; skip: number };
  checks: Check[];
}

interface Rig {
  sim: Simulator;
  dir: string;
  /** `preflight` and the serving flags for the simulator, then `extra` (later flags win). */
  args(extra?: string[]): string[];
  run(extra?: string[]): Promise<CliResult>;
  json(extra?: string[]): Promise<{ r: CliResult; report: JsonReport }>;
}

/**
 * A simulator, a token file and the flags for it. After `fn`, whatever it
 * ran: the simulator saw only GETs, no VM, config or task changed, and the
 * token secret appeared in no output.
 */
async function withRig(
  simOpts: SimOptions,
  fn: (r: Rig) => Promise<void>,
  prepare?: (sim: Simulator) => void,
): Promise<void> {
  const sim = await startSimulator(simOpts);
  prepare?.(sim);
  const dir = await Deno.makeTempDir({ prefix: "bf-preflight-" });
  const tokenFile = `${dir}/token`;
  await Deno.writeTextFile(tokenFile, sim.tokenSecret + "\n");
  const before = JSON.stringify(sim.vms());
  const outputs: string[] = [];
  const args = (extra: string[] = []) => [
    "preflight",
    ...providerArgs(sim, tokenFile, { seed: 32 }),
    ...extra,
  ];
  const run = async (extra: string[] = []) => {
    const r = await cli(args(extra), { timeoutMs: 60_000 });
    outputs.push(r.stdout, r.stderr);
    return r;
  };
  try {
    await fn({
      sim,
      dir,
      args,
      run,
      async json(extra = []) {
        const r = await run([...extra, "-o", "json"]);
        assert.equal(r.stderr, "", r.stderr);
        return { r, report: JSON.parse(r.stdout) as JsonReport };
      },
    });
    const writes = sim.requests.filter((q) => q.method !== "GET");
    assert.deepEqual(writes, [], "preflight sent only GETs");
    assert.equal(JSON.stringify(sim.vms()), before, "no VM or config changed");
    assert.deepEqual(sim.tasks(), [], "no task started");
    for (const out of outputs) {
      assert.ok(!out.includes(sim.tokenSecret), "the secret is never printed");
    }
  } finally {
    await sim.close();
    await Deno.remove(dir, { recursive: true });
  }
}

/**
 * The ACL deploy/host-setup/setup-token.sh writes with `args` (run against
 * stub pveum, for PVE `major`): what docs/credentials.md tells operators to
 * run is what preflight must find sufficient.
 */
async function scriptAcl(args: string[] = [], major = 8): Promise<SimAcl> {
  const res = await setupToken({ roles: major >= 9 ? ROLES_PVE9 : ROLES_PVE8 }, args);
  assert.equal(res.code, 0, res.stderr);
  return aclOf(res.mutations);
}

/** The simulator's template disks are on ceph-vm. */
const SIM_STORAGE = ["--storages", "ceph-vm"];

function find(report: JsonReport, check: string, subject?: string): Check[] {
  return report.checks.filter((c) =>
    c.check === check && (subject === undefined || c.subject === subject)
  );
}

function one(report: JsonReport, check: string, subject: string): Check {
  const hits = find(report, check, subject);
  assert.equal(hits.length, 1, `${check} ${subject}: ${JSON.stringify(report.checks, null, 1)}`);
  return hits[0];
}

/**
 * Every check PASSes, except the hooks, which preflight cannot see and says
 * so, and the guest check where no clone of the template runs to ask.
 */
function assertAllPass(report: JsonReport) {
  for (const c of report.checks) {
    if (c.check === "hooks" || (c.check === "guest" && c.status === "SKIP")) continue;
    assert.equal(c.status, "PASS", JSON.stringify(c));
  }
  const hooks = find(report, "hooks");
  assert.equal(hooks.length, 1);
  assert.equal(hooks[0].status, "SKIP");
  assert.match(hooks[0].message, /template never runs/);
  assert.equal(report.ok, true);
}

async function offerings(dir: string, list: [string, string, number][]): Promise<string> {
  const path = `${dir}/offerings-${crypto.randomUUID()}.json`;
  await Deno.writeTextFile(
    path,
    JSON.stringify(list.map(([type, zone, count]) => ({ instance_type: type, zone, count }))),
  );
  return `--offerings=${path}`;
}

const opts = { sanitizeOps: false, sanitizeResources: false };

Deno.test({
  name:
    "preflight: a cluster set up as setup-token.sh does passes every check, one line each, exit 0",
  ...opts,
  async fn() {
    await withRig({ acl: await scriptAcl(SIM_STORAGE) }, async (r) => {
      const t = await r.run();
      assert.equal(t.code, 0, t.stdout + t.stderr);
      assert.equal(t.stderr, "");
      const out = lines(t.stdout);
      const summary = out.pop()!;
      assert.equal(
        summary,
        "preflight: 22 passed, 0 warnings, 0 failed, 2 skipped: ready (nothing failed)",
      );
      for (const l of out) assert.match(l, /^(PASS|SKIP) {2}\S+ +\S/, l);
      const expect = [
        /^PASS {2}api {9}https:\/\/127\.0\.0\.1:\d+\/api2\/json: reachable; its certificate verifies against --proxmox-ca-file$/,
        /^PASS {2}token {7}bigfleet@pve!autoscaler: accepted \(Proxmox VE 8\.4\.1\)$/,
        /^PASS {2}node {8}pve1: online, Proxmox VE 8\.4\.1$/,
        /^PASS {2}node {8}pve2: online, Proxmox VE 8\.4\.1$/,
        /^PASS {2}pool {8}bigfleet: exists$/,
        /^PASS {2}privileges {2}\/pool\/bigfleet: Pool\.Audit, VM\.Allocate, VM\.Audit, VM\.Config\.CPU, VM\.Config\.Memory, VM\.Config\.Options, VM\.Monitor, VM\.PowerMgmt: /,
        /^PASS {2}privileges {2}\/nodes\/pve1: Sys\.Audit: to read the node's memory and CPUs/,
        /^PASS {2}privileges {2}\/nodes\/pve2: Sys\.Audit: /,
        /^PASS {2}privileges {2}\/vms: VM\.Audit \(propagated\): /,
        /^PASS {2}privileges {2}\/vms\/9000: VM\.Audit, VM\.Clone: /,
        /^PASS {2}privileges {2}\/storage\/ceph-vm: Datastore\.AllocateSpace, Datastore\.Audit: /,
        /^PASS {2}privileges {2}\/sdn\/zones\/localnetwork\/vmbr0: SDN\.Use: /,
        /^PASS {2}tags {8}bigfleet: cannot read the tag policy \(no Sys\.Audit on \/\)/,
        /^PASS {2}template {4}pve\.large\/pve1: VM 9000 on pve1: a template with the guest agent enabled; on the zone's own node$/,
        /^PASS {2}template {4}pve\.large\/pve2: VM 9000 on pve1: .*; clones to pve2 \(every volume on shared storage\)$/,
        /^PASS {2}template {4}pve\.xlarge\/pve1: /,
        /^PASS {2}template {4}pve\.xlarge\/pve2: /,
        /^PASS {2}storage {5}ceph-vm: 32 clones \(pve\.large\/pve1: 8, pve\.large\/pve2: 8, pve\.xlarge\/pve1: 8, pve\.xlarge\/pve2: 8\) need 640 GiB of disks; 954 GiB free$/,
        // The simulator's nodes: 512 GiB, 64 CPUs, nothing running.
        /^PASS {2}room {8}pve\.large in pve1: 31 more fit now: 522240 MiB and 256 vCPUs free \(guests hold 0 of 522240 MiB under the policy\)$/,
        /^PASS {2}room {8}pve\.xlarge in pve1: 15 more fit now: /,
        /^PASS {2}room {8}pve\.large in pve2: 31 more fit now: /,
        /^PASS {2}room {8}pve\.xlarge in pve2: 15 more fit now: /,
        /^SKIP {2}guest {7}template 9000: not checked: no running VM cloned from template 9000 to ask .*\. Fix: run `bigfleet-proxmox smoke`/,
        /^SKIP {2}hooks {7}\/bin\/sh \/run\/bigfleet-bootstrap: not checked: .*template never runs.*\. Fix: /,
      ];
      assert.equal(out.length, expect.length, t.stdout);
      expect.forEach((re, i) => assert.match(out[i], re));
    });
  },
});

Deno.test({
  name:
    "preflight: PVE 9 wants the VM.GuestAgent privileges; a PVE 8 grant (VM.Monitor) FAILs with the rename named",
  ...opts,
  async fn() {
    await withRig({ pveVersion: "9.0.3", acl: await scriptAcl(SIM_STORAGE, 9) }, async (r) => {
      const { r: res, report } = await r.json();
      assert.equal(res.code, 0);
      assertAllPass(report);
      assert.equal(report.pve_version, "9.0.3");
      assert.match(
        one(report, "privileges", "/pool/bigfleet").message,
        /VM\.GuestAgent\.Audit, VM\.GuestAgent\.Unrestricted/,
      );
    });
    await withRig({ pveVersion: "9.0.3", acl: await scriptAcl(SIM_STORAGE, 8) }, async (r) => {
      const { r: res, report } = await r.json();
      assert.equal(res.code, 1);
      const c = one(report, "privileges", "/pool/bigfleet");
      assert.equal(c.status, "FAIL");
      assert.match(
        c.message,
        /^missing VM\.GuestAgent\.Audit, VM\.GuestAgent\.Unrestricted, needed to /,
      );
      assert.match(c.fix!, /setup-token\.sh --pool bigfleet/);
      assert.match(c.fix!, /PVE 9 renamed VM\.Monitor to VM\.GuestAgent/);
    });
  },
});

Deno.test({
  name:
    "preflight: -o json and -o yaml carry every check with status, message and fix, and a summary",
  ...opts,
  async fn() {
    await withRig({}, async (r) => {
      const { r: res, report } = await r.json();
      assert.equal(res.code, 0);
      assert.deepEqual(Object.keys(report), [
        "ok",
        "backend",
        "api_url",
        "pve_version",
        "summary",
        "checks",
      ]);
      assert.equal(report.backend, "proxmox");
      assert.equal(report.api_url, r.sim.url);
      for (const c of report.checks) {
        assert.deepEqual(Object.keys(c), ["check", "subject", "status", "message", "fix"]);
        assert.ok(["PASS", "WARN", "FAIL", "SKIP"].includes(c.status));
        assert.equal(c.fix === null, c.status === "PASS", JSON.stringify(c));
      }
      const count = (s: string) => report.checks.filter((c) => c.status === s).length;
      assert.deepEqual(report.summary, {
        pass: count("PASS"),
        warn: count("WARN"),
        fail: count("FAIL"),
        skip: count("SKIP"),
      });
      assertAllPass(report);
      // Without an ACL model the simulator grants everything: the same checks pass.
      const y = await r.run(["-o", "yaml"]);
      assert.equal(y.code, 0);
      assert.deepEqual(parseYaml(y.stdout), report);
      // The chart adds `-o json` after the flags; the short and long forms are the same.
      const long = await r.run(["--output=json"]);
      assert.deepEqual(JSON.parse(long.stdout), report);
    });
  },
});

Deno.test({
  name: "preflight: a wrong CA or pin FAILs the trust check and sends nothing, not even the token",
  ...opts,
  async fn() {
    for (const trust of ["ca", "pin"]) {
      await withRig({}, async (r) => {
        const extra = trust === "ca"
          ? [`--proxmox-ca-file=${r.sim.wrongCaFile}`]
          : ["--proxmox-ca-file=", `--proxmox-tls-fingerprint=${"AB:".repeat(31)}AB`];
        const t = await r.run(extra);
        assert.equal(t.code, 1, t.stdout + t.stderr);
        const out = lines(t.stdout);
        assert.match(
          out[0],
          trust === "ca"
            ? /^FAIL {2}api {9}https:\/\/\S+: TLS verification of 127\.0\.0\.1:\d+ failed: .*; nothing was sent, so the token never left this host\. Fix: --proxmox-ca-file must hold the CA that signed/
            : /^FAIL {2}api {9}https:\/\/\S+: TLS fingerprint mismatch .*\. Fix: .*--proxmox-tls-fingerprint/,
        );
        assert.match(
          out[1],
          /^SKIP {2}token {7}bigfleet@pve!autoscaler: not checked: nothing was sent to the API$/,
        );
        for (const l of out.slice(2, -1)) {
          assert.match(l, /^SKIP {2}\S+ +not checked: the API's certificate is not trusted$/);
        }
        assert.match(out.at(-1)!, /0 passed, 0 warnings, 1 failed, 8 skipped: NOT ready/);
        assert.deepEqual(r.sim.requests, [], "no HTTP request reached the API");
      });
    }
  },
});

Deno.test({
  name: "preflight: a refused token FAILs with the fix; an unreachable API FAILs the api check",
  ...opts,
  async fn() {
    await withRig({}, async (r) => {
      const bad = `${r.dir}/bad-token`;
      await Deno.writeTextFile(bad, "00000000-0000-0000-0000-000000000000");
      const { r: res, report } = await r.json([`--proxmox-token-file=${bad}`]);
      assert.equal(res.code, 1);
      assert.equal(one(report, "api", r.sim.url).status, "PASS");
      const token = one(report, "token", r.sim.tokenId);
      assert.equal(token.status, "FAIL");
      assert.match(token.message, /^refused by the API: .*401 authentication failed/);
      assert.match(token.fix!, /--proxmox-token-id and the secret in --proxmox-token-file/);
      for (const c of report.checks.slice(2)) {
        assert.equal(c.status, "SKIP");
        assert.equal(c.message, "not checked: the token is not accepted");
      }
      assert.deepEqual(r.sim.requests.map((q) => [q.method, q.path, q.status]), [[
        "GET",
        "/version",
        401,
      ]]);
    });
    await withRig({}, async (r) => {
      const port = r.sim.port;
      const ca = `${r.dir}/ca.pem`;
      await Deno.copyFile(r.sim.caFile, ca);
      await r.sim.close();
      const { r: res, report } = await r.json([`--proxmox-ca-file=${ca}`]);
      assert.equal(res.code, 1);
      const api = report.checks[0];
      assert.equal(api.status, "FAIL");
      assert.match(
        api.message,
        new RegExp(`^cannot connect: connection to 127\\.0\\.0\\.1:${port} failed`),
      );
      assert.match(api.fix!, /check --proxmox-api-url/);
    });
  },
});

Deno.test({
  name:
    "preflight: a privilege missing on a path FAILs naming it and the grant; /vms audit unpropagated WARNs",
  ...opts,
  async fn() {
    // The token was granted VM.Clone on the template, its user was not: the token lacks it.
    const userLacks = await scriptAcl(SIM_STORAGE);
    for (const e of userLacks.entries) {
      if (e.ugid === "user" && e.path === "/vms/9000") {
        e.privs = e.privs.filter((p) => p !== "VM.Clone");
      }
    }
    await withRig({ acl: userLacks }, async (r) => {
      const { r: res, report } = await r.json();
      assert.equal(res.code, 1);
      const c = one(report, "privileges", "/vms/9000");
      assert.equal(c.status, "FAIL");
      assert.equal(c.message, "missing VM.Clone, needed to clone the template and read its config");
      assert.match(
        c.fix!,
        /^grant VM\.Clone on \/vms\/9000 to the token and to its user \(a privilege-separated token holds only what both hold\): deploy\/host-setup\/setup-token\.sh --templates 9000 does both/,
      );
      assert.match(
        c.fix!,
        /pveum acl modify \/vms\/9000 --roles <role> --tokens 'bigfleet@pve!autoscaler'/,
      );
      assert.equal(one(report, "privileges", "/pool/bigfleet").status, "PASS");
    });
    // VM.Audit on /vms only on the path itself: in-flight clones stay invisible (optional: WARN).
    const acl = await scriptAcl([...SIM_STORAGE, "--no-audit-all-vms"]);
    acl.entries.push({ path: "/vms", privs: ["VM.Audit"], propagate: false, ugid: "token" });
    acl.entries.push({ path: "/vms", privs: ["VM.Audit"], propagate: false, ugid: "user" });
    await withRig({ acl }, async (r) => {
      const { r: res, report } = await r.json();
      assert.equal(res.code, 0, "a WARN alone passes");
      const c = one(report, "privileges", "/vms");
      assert.equal(c.status, "WARN");
      assert.match(c.message, /^VM\.Audit granted on \/vms itself but not propagated below it/);
      assert.match(c.fix!, /with propagate/);
    });
    // Storage rights missing altogether.
    await withRig({ acl: await scriptAcl(["--storages", "local-lvm"]) }, async (r) => {
      const { report } = await r.json();
      const c = one(report, "privileges", "/storage/ceph-vm");
      assert.equal(c.status, "FAIL");
      assert.match(c.message, /^missing Datastore\.AllocateSpace, Datastore\.Audit/);
      assert.match(c.fix!, /setup-token\.sh --storages ceph-vm/);
    });
  },
});

Deno.test({
  name:
    "preflight: SDN.Use per template NIC: a VLAN tag needs a propagated bridge grant; an SDN vnet is found in its zone",
  ...opts,
  async fn() {
    const tagged = [{
      vmid: 9000,
      node: "pve1",
      name: "tmpl",
      config: { net0: "virtio=BC:24:11:00:00:01,bridge=vmbr0,tag=100" },
    }];
    // setup-token.sh --vlan-tags 200: the bridge unpropagated, and VLAN 200 only.
    const acl = await scriptAcl([...SIM_STORAGE, "--vlan-tags", "200"]);
    await withRig({ templates: tagged, acl }, async (r) => {
      const { r: res, report } = await r.json();
      assert.equal(res.code, 1);
      const c = one(report, "privileges", "/sdn/zones/localnetwork/vmbr0/100");
      assert.equal(c.status, "FAIL");
      assert.match(
        c.message,
        /^missing SDN\.Use, needed to clone a template whose NIC uses this VLAN of bridge vmbr0$/,
      );
      assert.match(c.fix!, /--bridges vmbr0 \(without --vlan-tags, or with this VLAN in it\)/);
    });
    const vnet = [{
      vmid: 9000,
      node: "pve1",
      name: "tmpl",
      config: { net0: "virtio=BC:24:11:00:00:01,bridge=vnet7" },
    }];
    await withRig(
      { templates: vnet, acl: await scriptAcl([...SIM_STORAGE, "--bridges", "zone1/vnet7"]) },
      async (r) => {
        const { r: res, report } = await r.json();
        assert.equal(res.code, 0);
        assert.equal(one(report, "privileges", "/sdn/zones/zone1/vnet7").status, "PASS");
        assert.equal(
          find(report, "privileges").filter((c) => c.subject.includes("localnetwork")).length,
          0,
        );
      },
    );
  },
});

Deno.test({
  name:
    "preflight: a node missing from the cluster or offline FAILs; its zone's templates are skipped",
  ...opts,
  async fn() {
    await withRig({}, async (r) => {
      const { r: res, report } = await r.json(["--nodes=pve1,pve2,pve3"]);
      assert.equal(res.code, 1);
      const c = one(report, "node", "pve3");
      assert.equal(c.status, "FAIL");
      assert.equal(c.message, "not a node of this cluster (it has pve1, pve2)");
      assert.match(c.fix!, /^correct --nodes/);
      assert.equal(one(report, "node", "pve1").status, "PASS");
    });
    await withRig({}, async (r) => {
      r.sim.faults.offlineNodes = ["pve2"];
      const { r: res, report } = await r.json();
      assert.equal(res.code, 1);
      const c = one(report, "node", "pve2");
      assert.equal(c.status, "FAIL");
      assert.match(c.message, /^offline: every Create in zone pve2 fails while it is$/);
      for (const t of find(report, "template").filter((x) => x.subject.endsWith("/pve2"))) {
        assert.equal(t.status, "SKIP");
        assert.equal(t.message, "not checked: node pve2 failed its check");
      }
      assert.equal(one(report, "template", "pve.large/pve1").status, "PASS");
    });
  },
});

Deno.test({
  name:
    "preflight: a node listed `unknown` (no pvestatd report yet) WARNs when it answers, FAILs when it does not",
  ...opts,
  async fn() {
    await withRig({}, async (r) => {
      r.sim.faults.unreportedNodes = ["pve2"];
      const { r: res, report } = await r.json();
      assert.equal(res.code, 0, "a WARN is not a failure");
      const c = one(report, "node", "pve2");
      assert.equal(c.status, "WARN");
      assert.match(c.message, /^answers, but the cluster has no status figures from it yet/);
      assert.match(c.fix!, /check pvestatd on pve2/);
      const pve2 = find(report, "template").filter((x) => x.subject.endsWith("/pve2"));
      assert.ok(pve2.length > 0 && pve2.every((t) => t.status === "PASS"), "its templates checked");
    });
    await withRig({}, async (r) => {
      r.sim.faults.unreportedNodes = ["pve2"];
      r.sim.faults.http596.push({ path: "/nodes/pve2/version", count: 1, performed: false });
      const { r: res, report } = await r.json();
      assert.equal(res.code, 1);
      const c = one(report, "node", "pve2");
      assert.equal(c.status, "FAIL");
      assert.match(c.message, /^status unknown, and it does not answer \(.*596.*\)/);
      for (const t of find(report, "template").filter((x) => x.subject.endsWith("/pve2"))) {
        assert.equal(t.status, "SKIP");
      }
    });
  },
});

Deno.test({
  name: "preflight: a missing pool FAILs (or WARNs with none configured, checking /vms instead)",
  ...opts,
  async fn() {
    await withRig({ pools: ["other"] }, async (r) => {
      const { r: res, report } = await r.json();
      assert.equal(res.code, 1);
      const c = one(report, "pool", "bigfleet");
      assert.equal(c.status, "FAIL");
      assert.match(c.message, /^does not exist/);
      assert.match(c.fix!, /pveum pool add bigfleet/);
    });
    await withRig({}, async (r) => {
      const { r: res, report } = await r.json(["--proxmox-pool="]);
      assert.equal(res.code, 0);
      const c = one(report, "pool", "(none)");
      assert.equal(c.status, "WARN");
      assert.match(c.message, /^no --proxmox-pool/);
      // Without a pool the VM rights must reach every new VMID from /vms.
      assert.match(
        one(report, "privileges", "/vms").message,
        /^VM\.Allocate, VM\.Audit, VM\.Config\.CPU, VM\.Config\.Memory, VM\.Config\.Options, VM\.Monitor, VM\.PowerMgmt \(propagated\): /,
      );
      assert.equal(find(report, "privileges", "/pool/bigfleet").length, 0);
    });
  },
});

Deno.test({
  name:
    "preflight: templates missing, not a template, without the agent, or on local storage for another zone FAIL with the fix",
  ...opts,
  async fn() {
    await withRig({}, async (r) => {
      const { r: res, report } = await r.json(["--template-vmid=9100"]);
      assert.equal(res.code, 1);
      const c = one(report, "template", "pve.large/pve1");
      assert.equal(c.status, "FAIL");
      assert.equal(c.message, "template VM 9100 not found on any node (pve1, pve2)");
      assert.match(c.fix!, /^build the template \(docs\/templates\.md\)/);
      // Still checked: the rights on the VMID the flags name.
      assert.equal(one(report, "privileges", "/vms/9100").status, "PASS");
    });
    await withRig({
      templates: [{ vmid: 9000, node: "pve1", name: "tmpl" }, {
        vmid: 9001,
        node: "pve1",
        name: "plain",
        template: false,
      }],
    }, async (r) => {
      const { report } = await r.json(["--template-vmid=9001"]);
      const c = one(report, "template", "pve.large/pve1");
      assert.equal(c.status, "FAIL");
      assert.equal(c.message, "VM 9001 on pve1 is not a template");
      assert.match(c.fix!, /qm template 9001/);
    });
    await withRig(
      { templates: [{ vmid: 9000, node: "pve1", name: "tmpl", agent: "0" }] },
      async (r) => {
        const { report } = await r.json();
        const c = one(report, "template", "pve.large/pve1");
        assert.equal(c.status, "FAIL");
        assert.match(c.message, /^template VM 9000 does not enable the QEMU guest agent/);
        assert.match(c.fix!, /^enable it: qm set 9000 --agent enabled=1/);
      },
    );
    await withRig(
      { templates: [{ vmid: 9000, node: "pve1", name: "tmpl", sharedStorage: false }] },
      async (r) => {
        const { r: res, report } = await r.json();
        assert.equal(res.code, 1);
        assert.equal(one(report, "template", "pve.large/pve1").status, "PASS");
        const c = one(report, "template", "pve.large/pve2");
        assert.equal(c.status, "FAIL");
        assert.equal(
          c.message,
          "VM 9000 on pve1 cannot be cloned to pve2: volume scsi0 is on storage 'local-lvm', which is not shared",
        );
        assert.match(
          c.fix!,
          /^give pve2 a template of its own .*--template-vmid pve1=9000,pve2=VMID/,
        );
        // Clones that cannot be made take no room: only pve1's local storage is counted.
        assert.deepEqual(find(report, "storage").map((x) => x.subject), ["local-lvm on pve1"]);
      },
    );
  },
});

Deno.test({
  name:
    "preflight: --template-name finds each node's template; several of that name on a node FAIL",
  ...opts,
  async fn() {
    const templates = [
      { vmid: 9000, node: "pve1", name: "k8s" },
      { vmid: 9001, node: "pve2", name: "k8s" },
      { vmid: 9002, node: "pve2", name: "k8s" },
    ];
    await withRig({ templates }, async (r) => {
      const { r: res, report } = await r.json(["--template-name=k8s"]);
      assert.equal(res.code, 1);
      assert.match(one(report, "template", "pve.large/pve1").message, /^VM 9000 on pve1: /);
      const c = one(report, "template", "pve.large/pve2");
      assert.equal(c.status, "FAIL");
      assert.equal(c.message, 'several templates named "k8s" on node pve2 (VMs 9001, 9002)');
      assert.match(c.fix!, /^keep one template of that name per node/);
    });
  },
});

Deno.test({
  name:
    "preflight: node-local templates per zone pass, with each node's local storage checked for room",
  ...opts,
  async fn() {
    const templates = [
      { vmid: 9000, node: "pve1", name: "tmpl-1", sharedStorage: false },
      { vmid: 9001, node: "pve2", name: "tmpl-2", sharedStorage: false },
    ];
    await withRig({
      templates,
      acl: await scriptAcl(["--templates", "9000,9001", "--storages", "local-lvm"]),
    }, async (r) => {
      const { r: res, report } = await r.json(["--template-vmid=pve1=9000,pve2=9001"]);
      assert.equal(res.code, 0, JSON.stringify(report.checks.filter((c) => c.status !== "PASS")));
      assertAllPass(report);
      assert.match(
        one(report, "template", "pve.large/pve2").message,
        /^VM 9001 on pve2: .*on the zone's own node$/,
      );
      assert.match(
        one(report, "storage", "local-lvm on pve1").message,
        // 1 TiB, 50 GiB used by others and 20 GiB by the template's own disk.
        /^16 clones .* need 320 GiB of disks; 954 GiB free$/,
      );
      assert.equal(one(report, "storage", "local-lvm on pve2").status, "PASS");
      assert.equal(one(report, "privileges", "/vms/9001").status, "PASS");
    });
  },
});

Deno.test({
  name: "preflight: a storage too small for every slot's disks FAILs; exactly enough passes",
  ...opts,
  async fn() {
    const storages = [
      { id: "local", type: "dir", content: "iso,vztmpl,backup,snippets" },
      // 20 GiB used by others and 20 GiB by the template's own disk: 60 GiB free.
      { id: "ceph-vm", type: "rbd", totalBytes: 100 * GIB, usedBytes: 20 * GIB },
    ];
    await withRig({ storages }, async (r) => {
      // 20 GiB per clone (the template's scsi0); 60 GiB free besides the template's own 20 GiB.
      const fits = await r.json([
        await offerings(r.dir, [["pve.small", "pve1", 1], ["pve.small", "pve2", 2]]),
      ]);
      assert.equal(fits.r.code, 0);
      assert.equal(
        one(fits.report, "storage", "ceph-vm").message,
        "3 clones (pve.small/pve1: 1, pve.small/pve2: 2) need 60 GiB of disks; 60 GiB free",
      );
      const t = await r.run([
        await offerings(r.dir, [["pve.small", "pve1", 2], ["pve.small", "pve2", 2]]),
      ]);
      assert.equal(t.code, 1);
      const line = lines(t.stdout).find((l) => l.startsWith("FAIL  storage"));
      assert.ok(line, t.stdout);
      assert.match(
        line,
        /^FAIL {2}storage {5}ceph-vm: too small: 4 clones \(pve\.small\/pve1: 2, pve\.small\/pve2: 2\) need 80 GiB of disks, only 60 GiB free\. Fix: free space on ceph-vm, lower the offerings' counts there/,
      );
      // A storage that is offline holds nothing.
      r.sim.faults.offlineStorages = ["ceph-vm"];
      const { report } = await r.json();
      const off = one(report, "storage", "ceph-vm");
      assert.equal(off.status, "FAIL");
      assert.match(off.message, /^not active on pve1, where 32 clones would go/);
    });
  },
});

Deno.test({
  name:
    "preflight: a locked template WARNs (exit 0); --timeout cuts a hanging API short with a FAIL",
  ...opts,
  async fn() {
    await withRig({}, async (r) => {
      const { r: res, report } = await r.json();
      assert.equal(res.code, 0);
      const c = one(report, "template", "pve.large/pve1");
      assert.equal(c.status, "WARN");
      assert.match(c.message, /locked \(backup\): Creates wait until the lock is gone$/);
      assert.match(c.fix!, /qm unlock 9000/);
    }, (sim) => sim.setLock(9000, "backup"));
    await withRig({}, async (r) => {
      r.sim.faults.http596.push({ path: /^\/nodes$/, count: 5, delayMs: 10_000, performed: false });
      const { r: res, report } = await r.json(["--timeout=2s"]);
      assert.equal(res.code, 1);
      const node = find(report, "node");
      assert.equal(node.length, 1);
      assert.equal(node[0].status, "FAIL");
      assert.equal(node[0].message, "did not finish in time");
      assert.match(node[0].fix!, /--timeout/);
      for (const c of report.checks.slice(3)) assert.equal(c.status, "SKIP", JSON.stringify(c));
    });
  },
});

Deno.test({
  name:
    "preflight: the chart's flags (listeners, no --state) bind nothing; a --state given anyway is never opened",
  ...opts,
  async fn() {
    await withRig({}, async (r) => {
      const state = `${r.dir}/state.kv`;
      const busy = Deno.listen({ hostname: "127.0.0.1", port: 0 });
      const port = (busy.addr as Deno.NetAddr).port;
      try {
        // Serving would fail on the taken ports; preflight never listens.
        const t = await r.run([
          `--addr=127.0.0.1:${port}`,
          `--metrics-addr=127.0.0.1:${port}`,
          `--state=${state}`,
        ]);
        assert.equal(t.code, 0, t.stdout + t.stderr);
      } finally {
        busy.close();
      }
      await assert.rejects(Deno.stat(state), Deno.errors.NotFound);
    });
  },
});

Deno.test({
  name: "preflight: the fake backend has nothing to check (exit 0, one line); usage errors exit 2",
  ...opts,
  async fn() {
    const fake = await cli(["preflight", "--use-fake-backend"]);
    assert.equal(fake.code, 0, fake.stderr);
    assert.deepEqual(lines(fake.stdout), [
      "SKIP  backend  fake: the fake backend creates no VMs: there is no Proxmox cluster to check. Fix: run preflight with the flags of a real deployment (--proxmox-api-url and the rest)",
      "preflight: 0 passed, 0 warnings, 0 failed, 1 skipped: ready (nothing failed)",
    ]);
    const fakeJson = JSON.parse(
      (await cli(["preflight", "--use-fake-backend", "-o", "json"])).stdout,
    );
    assert.equal(fakeJson.ok, true);
    assert.equal(fakeJson.backend, "fake");

    const cases: [string[], string][] = [
      [["preflight"], "error: no Proxmox API configured: set --proxmox-api-url"],
      [
        ["preflight", "--use-fake-backend", "-o", "table"],
        'error: --output: want text, json or yaml, got "table"',
      ],
      [
        ["preflight", "--use-fake-backend", "--timeout=0s"],
        'error: --timeout: must be more than 0, got "0s"',
      ],
      [["preflight", "--node=pve1"], "error: unknown flag --node (did you mean --nodes?)"],
      [
        ["preflight", "--proxmox-api-url=http://pve:8006/api2/json"],
        "error: --proxmox-api-url: must be an https:// URL",
      ],
    ];
    for (const [args, want] of cases) {
      const r = await cli(args);
      assert.equal(r.code, 2, `${args.join(" ")}: ${r.stdout}${r.stderr}`);
      assert.equal(r.stdout, "");
      const err = lines(r.stderr);
      assert.equal(err.length, 1, r.stderr);
      assert.ok(err[0].startsWith(want), `${err[0]} should start with ${want}`);
    }
  },
});

/** `acl` with `privs` on `path` for the token and its user (privilege separation holds both). */
function grantBoth(acl: SimAcl, path: string, privs: string[]): SimAcl {
  for (const ugid of ["token", "user"] as const) {
    acl.entries.push({ path, privs, propagate: false, ugid });
  }
  return acl;
}

Deno.test({
  name:
    "preflight: the tag policy: which mode refuses which tag, with the fix; readable with Sys.Audit on /",
  ...opts,
  async fn() {
    const audited = async () => grantBoth(await scriptAcl(SIM_STORAGE), "/", ["Sys.Audit"]);
    // list without bigfleet: WARN naming the tag, the mode and how to allow it.
    await withRig({
      acl: await audited(),
      datacenter: { userTagAccess: { userAllow: "list", userAllowList: ["k8s"] } },
    }, async (r) => {
      const { r: res, report } = await r.json();
      assert.equal(res.code, 0, "a WARN alone passes");
      const c = one(report, "tags", "bigfleet");
      assert.equal(c.status, "WARN");
      assert.match(c.message, /user-allow=list refuses tag 'bigfleet'.*VMs go without it/);
      assert.match(c.message, /the template's tag template stays on its clones/);
      assert.match(c.fix!, /user-allow-list=k8s;bigfleet/);
      assert.match(c.fix!, /Sys\.Modify on \//);
    });
    // list with bigfleet: PASS; the template's tags outside the list stay (said, not a problem).
    await withRig({
      acl: await audited(),
      datacenter: { userTagAccess: { userAllow: "list", userAllowList: ["bigfleet"] } },
    }, async (r) => {
      const c = one((await r.json()).report, "tags", "bigfleet");
      assert.equal(c.status, "PASS", JSON.stringify(c));
      assert.match(c.message, /user-allow=list lets the token set bigfleet/);
      assert.match(c.message, /the template's tags k8s, template stay on its clones/);
    });
    // none: nothing may change.
    await withRig({
      acl: await audited(),
      datacenter: { userTagAccess: { userAllow: "none" } },
    }, async (r) => {
      const c = one((await r.json()).report, "tags", "bigfleet");
      assert.equal(c.status, "WARN");
      assert.match(c.message, /user-allow=none refuses tag 'bigfleet'/);
      assert.match(c.fix!, /--proxmox-tags=/);
    });
    // A registered tag needs Sys.Modify even under free.
    await withRig({
      acl: await audited(),
      datacenter: { registeredTags: ["bigfleet"] },
    }, async (r) => {
      const c = one((await r.json()).report, "tags", "bigfleet");
      assert.equal(c.status, "WARN");
      assert.match(c.message, /'bigfleet' is a registered tag/);
      assert.match(c.fix!, /registered-tags/);
    });
    // Sys.Modify on / lifts every restriction.
    await withRig({
      acl: grantBoth(await audited(), "/", ["Sys.Audit", "Sys.Modify"]),
      datacenter: { userTagAccess: { userAllow: "none" } },
    }, async (r) => {
      const c = one((await r.json()).report, "tags", "bigfleet");
      assert.equal(c.status, "PASS");
      assert.match(c.message, /Sys\.Modify on \//);
    });
  },
});

Deno.test({
  name:
    "preflight: the tag policy without Sys.Audit: read from allowed-tags; the per-machine tag WARNs under list",
  ...opts,
  async fn() {
    // list allowing bigfleet: the template's own tags are missing from allowed-tags, so the
    // mode is not free: the per-machine tag (never in a list) is refused.
    await withRig({
      acl: await scriptAcl(SIM_STORAGE),
      datacenter: { userTagAccess: { userAllow: "list", userAllowList: ["bigfleet"] } },
    }, async (r) => {
      const plain = one((await r.json()).report, "tags", "bigfleet");
      assert.equal(plain.status, "PASS", JSON.stringify(plain));
      const c = one(
        (await r.json(["--proxmox-tags=bigfleet,@machine"])).report,
        "tags",
        "bigfleet,@machine",
      );
      assert.equal(c.status, "WARN");
      assert.match(c.message, /refuses the per-machine tag \(@machine\)/);
      assert.match(c.fix!, /leave @machine out of --proxmox-tags/);
    });
    // free (nothing set): the template's tags show up in allowed-tags; no sign of a restriction.
    await withRig({ acl: await scriptAcl(SIM_STORAGE) }, async (r) => {
      const c = one(
        (await r.json(["--proxmox-tags=bigfleet,@machine"])).report,
        "tags",
        "bigfleet,@machine",
      );
      assert.equal(c.status, "PASS", JSON.stringify(c));
      assert.match(c.message, /cannot read the tag policy \(no Sys\.Audit on \/\)/);
    });
  },
});

Deno.test({
  name:
    "preflight: a template's own options need their privileges (Sys.Console, Mapping.Use, vmstatestorage); host devices FAIL",
  ...opts,
  async fn() {
    const special = [{
      vmid: 9000,
      node: "pve1",
      name: "tmpl",
      config: {
        ide2: "cdrom,media=cdrom",
        usb0: "mapping=dongle",
        vmstatestorage: "local-lvm",
      },
    }];
    await withRig({ templates: special, acl: await scriptAcl(SIM_STORAGE) }, async (r) => {
      const { r: res, report } = await r.json();
      assert.equal(res.code, 1);
      const cons = one(report, "privileges", "/");
      assert.equal(cons.status, "FAIL");
      assert.match(
        cons.message,
        /^missing Sys\.Console, needed to clone template 9000, whose ide2 is the host's CD-ROM drive/,
      );
      assert.doesNotMatch(cons.fix!, /setup-token\.sh/, "the script does not grant it");
      assert.match(cons.fix!, /pveum acl modify \/ --roles <role> --tokens/);
      const map = one(report, "privileges", "/mapping/usb/dongle");
      assert.equal(map.status, "FAIL");
      assert.match(
        map.message,
        /^missing Mapping\.Use, needed to clone template 9000, whose usb0 uses mapping dongle/,
      );
      const state = one(report, "privileges", "/storage/local-lvm");
      assert.equal(state.status, "FAIL");
      assert.match(
        state.message,
        /^missing Datastore\.AllocateSpace, needed to clone template 9000 \(vmstatestorage local-lvm\)/,
      );
    });
    const host = [{ vmid: 9000, node: "pve1", name: "tmpl", config: { hostpci0: "0000:01:00.0" } }];
    await withRig({ templates: host, acl: await scriptAcl(SIM_STORAGE) }, async (r) => {
      const { r: res, report } = await r.json();
      assert.equal(res.code, 1);
      const c = one(report, "template", "pve.large/pve1");
      assert.equal(c.status, "FAIL");
      assert.match(
        c.message,
        /hostpci0 passes a host PCI device through: only root@pam may clone it/,
      );
      assert.match(c.fix!, /Resource Mappings/);
    });
  },
});

Deno.test({
  name:
    "preflight: which types fit which nodes today (room): PASS with how many more, WARN for no room now and for never",
  ...opts,
  async fn() {
    const simOpts = {
      nodeResources: { pve1: { memoryMib: 24105, cpus: 8 } },
      acl: await scriptAcl(SIM_STORAGE),
    };
    // A VM of someone else holds 60% of pve1 (the real node of issue 26).
    const busy = (sim: Simulator) =>
      sim.addVm({ vmid: 500, name: "foreign", template: false, running: true, memory: 14463 });
    await withRig(simOpts, async (r) => {
      const { r: res, report } = await r.json([
        await offerings(r.dir, [
          ["pve.small", "pve1", 1],
          ["pve.medium", "pve1", 1],
          ["pve.xlarge", "pve1", 1],
          ["pve.xlarge", "pve2", 1],
        ]),
      ]);
      assert.equal(res.code, 0, "WARNs only");
      const small = one(report, "room", "pve.small in pve1");
      assert.equal(small.status, "PASS");
      assert.match(small.message, /^1 more fit now: 7594 MiB and \d+ vCPUs free/);
      const medium = one(report, "room", "pve.medium in pve1");
      assert.equal(medium.status, "WARN");
      assert.match(medium.message, /^no room now: 7594 MiB/);
      assert.match(medium.fix!, /refused until VMs there stop or move, or the policy allows more/);
      const xlarge = one(report, "room", "pve.xlarge in pve1");
      assert.equal(xlarge.status, "WARN");
      assert.equal(
        xlarge.message,
        "never fits: pve.xlarge has 16 vCPUs and node pve1 has 8 CPUs (Proxmox starts no VM " +
          "with more vCPUs than its node has CPUs)",
      );
      assert.equal(one(report, "room", "pve.xlarge in pve2").status, "PASS");
    }, busy);
  },
});

Deno.test({
  name:
    "preflight: a token without Sys.Audit on /nodes FAILs privileges naming it, and each zone's room WARNs",
  ...opts,
  async fn() {
    const acl = await scriptAcl(SIM_STORAGE);
    acl.entries = acl.entries.filter((e) => e.path !== "/nodes");
    await withRig({ acl }, async (r) => {
      const { r: res, report } = await r.json();
      assert.equal(res.code, 1);
      const priv = one(report, "privileges", "/nodes/pve1");
      assert.equal(priv.status, "FAIL");
      assert.match(priv.message, /^missing Sys\.Audit, needed to read the node's memory and CPUs/);
      assert.match(priv.fix!, /setup-token\.sh with its defaults does both/);
      const room = one(report, "room", "pve1");
      assert.equal(room.status, "WARN");
      assert.match(room.message, /cannot see node pve1's memory and CPUs: grant it Sys\.Audit/);
    });
  },
});

/** An instance-type catalog file in `dir`, as the flag that names it. */
async function catalog(dir: string, types: Record<string, unknown>): Promise<string> {
  const path = `${dir}/types-${crypto.randomUUID()}.json`;
  await Deno.writeTextFile(path, JSON.stringify(types));
  return `--instance-types=${path}`;
}

const BIG = {
  vcpu: 2,
  memory_mib: 2048,
  disk_gib: 40,
  storage: "local-lvm",
  network: { bridge: "vmbr1", tag: 30 },
};

Deno.test({
  name:
    "preflight: disk_gib, network and storage need their privileges; setup-token.sh's --resize-disks --set-network grant them",
  ...opts,
  async fn() {
    const scriptArgs = ["--storages", "ceph-vm,local-lvm", "--bridges", "vmbr0,vmbr1"];
    const flags = async (dir: string) => [
      await catalog(dir, { "pve.big": BIG }),
      await offerings(dir, [["pve.big", "pve1", 2]]),
    ];
    await withRig({ acl: await scriptAcl(scriptArgs) }, async (r) => {
      const { r: res, report } = await r.json(await flags(r.dir));
      assert.equal(res.code, 1);
      const pool = one(report, "privileges", "/pool/bigfleet");
      assert.equal(pool.status, "FAIL");
      assert.match(pool.message, /^missing VM\.Config\.Disk, VM\.Config\.Network, needed to /);
      assert.match(
        pool.fix!,
        /setup-token\.sh --pool bigfleet --resize-disks --set-network does both/,
      );
    });
    const acl = await scriptAcl([...scriptArgs, "--resize-disks", "--set-network"]);
    await withRig({ acl }, async (r) => {
      const { r: res, report } = await r.json(await flags(r.dir));
      assert.equal(res.code, 0, JSON.stringify(report.checks.filter((c) => c.status !== "PASS")));
      assertAllPass(report);
      assert.match(
        one(report, "privileges", "/sdn/zones/localnetwork/vmbr1/30").message,
        /^SDN\.Use: to put the net0 of pve\.big's clones on bridge vmbr1 VLAN 30$/,
      );
      assert.equal(one(report, "privileges", "/storage/local-lvm").status, "PASS");
      assert.match(
        one(report, "template", "pve.big/pve1").message,
        /; on the zone's own node; disks onto local-lvm; boot disk grown to 40 GiB; net0 on vmbr1 \(tag 30\)$/,
      );
      assert.match(
        one(report, "storage", "local-lvm on pve1").message,
        /^2 clones \(pve\.big\/pve1: 2\) need 80 GiB of disks; /,
      );
    });
  },
});

Deno.test({
  name:
    "preflight: a type its template cannot serve FAILs with the fix (a smaller disk_gib, a storage without disks, linked on LVM)",
  ...opts,
  async fn() {
    const storages = [
      { id: "local", type: "dir", content: "iso,vztmpl,backup" },
      { id: "ceph-vm", type: "rbd" },
      { id: "san", type: "lvm", shared: true },
    ];
    const templates = [
      { vmid: 9000, node: "pve1", name: "t", storage: "ceph-vm" },
      { vmid: 9100, node: "pve1", name: "lvm", storage: "san" },
    ];
    await withRig({ storages, templates }, async (r) => {
      const types = {
        "pve.tiny": { vcpu: 1, memory_mib: 1024, disk_gib: 10 },
        "pve.iso": { vcpu: 1, memory_mib: 1024, storage: "local" },
        "pve.link": { vcpu: 1, memory_mib: 1024, clone: "linked", template_vmid: 9100 },
      };
      const { r: res, report } = await r.json([
        await catalog(r.dir, types),
        await offerings(r.dir, [["pve.tiny", "pve1", 1], ["pve.iso", "pve1", 1], [
          "pve.link",
          "pve1",
          1,
        ]]),
      ]);
      assert.equal(res.code, 1);
      const want: [string, RegExp, RegExp][] = [
        [
          "pve.tiny/pve1",
          /^VM 9000 on pve1: template 9000's boot disk scsi0 is 20 GiB, larger than disk_gib 10 of pve\.tiny, and Proxmox never shrinks a disk$/,
          /^raise disk_gib to at least 20/,
        ],
        [
          "pve.iso/pve1",
          /storage 'local' does not hold VM disks \(its content is iso,vztmpl,backup\)$/,
          /^add images to it \(pvesm set local --content images,…\)/,
        ],
        [
          "pve.link/pve1",
          /clone "linked" needs storage that can clone volumes: template 9100's scsi0 is on 'san' \(lvm\), which cannot$/,
          /^use clone "full"/,
        ],
      ];
      for (const [subject, message, fix] of want) {
        const c = one(report, "template", subject);
        assert.equal(c.status, "FAIL", subject);
        assert.match(c.message, message);
        assert.match(c.fix!, fix);
      }
    });
  },
});

Deno.test({
  name:
    "preflight: the guest check asks a running clone's agent: commands disabled (RHEL/Rocky 10) FAIL with the fix, all allowed PASS",
  ...opts,
  async fn() {
    const machineId = "pve-test/OnDemand/pve.large/pve1/000";
    const clone = (guest?: SimGuest) => ({
      vmid: 100,
      node: "pve1",
      name: "bigfleet-pve-test-ondemand-pve-large-pve1-000",
      description: buildDescription(machineId, "op-1"),
      template: false,
      running: true,
      guest,
    });
    const templates = (guest?: SimGuest) => [
      { vmid: 9000, node: "pve1", name: "tmpl-k8s", guest },
      clone(guest),
    ];
    await withRig({ templates: templates(RHEL10_GUEST) }, async (r) => {
      const { r: res, report } = await r.json();
      assert.equal(res.code, 1);
      const c = one(report, "guest", "template 9000");
      assert.equal(c.status, "FAIL");
      assert.equal(
        c.message,
        "the guest agent of VM 100 refuses guest-file-open, guest-file-write, guest-file-close, " +
          "guest-exec, guest-exec-status (disabled in its configuration): asked VM 100 on pve1 " +
          `(${machineId}, cloned from template 9000)`,
      );
      assert.match(c.fix!, /\/etc\/sysconfig\/qemu-ga .*allow-rpcs/);
    });
    await withRig({ templates: templates() }, async (r) => {
      const { r: res, report } = await r.json();
      assert.equal(res.code, 0);
      const c = one(report, "guest", "template 9000");
      assert.equal(c.status, "PASS");
      assert.match(c.message, /^the guest agent of VM 100 on pve1 .* allows guest-file-open, /);
    });
  },
});

Deno.test({
  name:
    "preflight (PVE 9.2.11): each node's version is reported; a template whose cpu is a custom model needs Mapping.Use on /mapping/cpu/<name>, FAILing with setup-token.sh's fix until its ACL grants it",
  ...opts,
  async fn() {
    const custom = [{
      vmid: 9000,
      node: "pve1",
      name: "tmpl",
      config: { cpu: "custom-bigfleet,flags=+aes" },
    }];
    // setup-token.sh reads the template's cpu from the cluster; without it, nothing is granted.
    await withRig(
      { pveVersion: "9.2.11", templates: custom, acl: await scriptAcl(SIM_STORAGE, 9) },
      async (r) => {
        const { r: res, report } = await r.json();
        assert.equal(res.code, 1, JSON.stringify(report.checks));
        assert.match(one(report, "node", "pve1").message, /^online, Proxmox VE 9\.2\.11$/);
        assert.match(one(report, "node", "pve2").message, /^online, Proxmox VE 9\.2\.11$/);
        const c = one(report, "privileges", "/mapping/cpu/bigfleet");
        assert.equal(c.status, "FAIL");
        assert.match(
          c.message,
          /^missing Mapping\.Use, needed to clone template 9000, whose cpu is the custom model bigfleet/,
        );
        assert.match(c.fix!, /setup-token\.sh --templates 9000 does both/);
      },
    );
    const granted = await setupToken({
      roles: ROLES_PVE9,
      resources: '[{"id":"qemu/9000","type":"qemu","vmid":9000,"node":"pve1","template":1}]',
      configs: { "pve1/9000": '{"cpu":"custom-bigfleet,flags=+aes","template":1}' },
    }, SIM_STORAGE);
    assert.equal(granted.code, 0, granted.stderr);
    await withRig(
      { pveVersion: "9.2.11", templates: custom, acl: aclOf(granted.mutations) },
      async (r) => {
        const { r: res, report } = await r.json();
        assert.equal(res.code, 0, JSON.stringify(report.checks.filter((c) => c.status !== "PASS")));
        assert.equal(one(report, "privileges", "/mapping/cpu/bigfleet").status, "PASS");
      },
    );
    // On PVE 8 a clone checks nothing about the CPU model.
    await withRig({ templates: custom, acl: await scriptAcl(SIM_STORAGE) }, async (r) => {
      const { r: res, report } = await r.json();
      assert.equal(res.code, 0);
      assert.deepEqual(find(report, "privileges", "/mapping/cpu/bigfleet"), []);
    });
  },
});

Deno.test({
  name:
    "preflight (PVE 9.2.11): the guest agent needs VM.GuestAgent.Unrestricted for exec (it also does for ping and file-write); Audit and FileWrite alone FAIL naming exec",
  ...opts,
  async fn() {
    /** setup-token.sh's PVE 9 ACL with the pool role's agent privileges replaced by `agent`. */
    const withAgent = async (agent: string[]): Promise<SimAcl> => {
      const acl = await scriptAcl(SIM_STORAGE, 9);
      const entries = acl.entries.map((e) =>
        e.path === "/pool/bigfleet"
          ? { ...e, privs: [...e.privs.filter((p) => !p.startsWith("VM.GuestAgent.")), ...agent] }
          : e
      );
      return { ...acl, entries };
    };
    await withRig(
      { pveVersion: "9.2.11", acl: await withAgent(["VM.GuestAgent.Unrestricted"]) },
      async (r) => {
        const { r: res, report } = await r.json();
        assert.equal(res.code, 0, JSON.stringify(report.checks.filter((c) => c.status !== "PASS")));
        assert.match(
          one(report, "privileges", "/pool/bigfleet").message,
          /VM\.GuestAgent\.Unrestricted/,
        );
      },
    );
    await withRig(
      {
        pveVersion: "9.2.11",
        acl: await withAgent(["VM.GuestAgent.Audit", "VM.GuestAgent.FileWrite"]),
      },
      async (r) => {
        const { r: res, report } = await r.json();
        assert.equal(res.code, 1);
        const c = one(report, "privileges", "/pool/bigfleet");
        assert.equal(c.status, "FAIL");
        assert.equal(
          c.message,
          "missing VM.GuestAgent.Unrestricted, needed to run the bootstrap hook and kubectl " +
            "drain in the guest (agent exec, exec-status)",
        );
        assert.match(c.fix!, /setup-token\.sh --pool bigfleet/);
      },
    );
  },
});
