// The systemd unit of deploy/systemd/: docs/install.md shows it as it is,
// `systemd-analyze verify` accepts it without a warning, its command line is
// one the binary accepts, and every file the provider reads is one its
// DynamicUser can read: a systemd credential (%d) or its StateDirectory.

import assert from "node:assert/strict";
import { loadConfig } from "../../src/config/load.ts";
import { ignoreWithout } from "../harness/tools.ts";
import { makeCa } from "../pvesim/certs.ts";
import { ROOT } from "./helm_helpers.ts";

const UNIT = `${ROOT}deploy/systemd/bigfleet-proxmox.service`;
const BINARY = "/usr/local/bin/bigfleet-proxmox";

/** `[Service]` keys (repeated keys kept in order), continuation lines joined. */
function parseUnit(text: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  const joined = text.replace(/\\\n\s*/g, " ");
  let section = "";
  for (const raw of joined.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const h = /^\[(\w+)\]$/.exec(line);
    if (h) {
      section = h[1];
      continue;
    }
    const eq = line.indexOf("=");
    const key = `${section}.${line.slice(0, eq)}`;
    out.set(key, [...(out.get(key) ?? []), line.slice(eq + 1)]);
  }
  return out;
}

const FILE_FLAGS = [
  "proxmox-token-file",
  "proxmox-ca-file",
  "offerings",
  "instance-types",
  "tls-cert",
  "tls-key",
  "tls-ca",
];

Deno.test("systemd: docs/install.md shows the unit file as it is", async () => {
  const doc = await Deno.readTextFile(`${ROOT}docs/install.md`);
  const section = doc.slice(doc.indexOf("### systemd unit"));
  const block = /```ini\n([\s\S]*?)```/.exec(section);
  assert.ok(block, "an ini block under § systemd unit");
  assert.equal(block[1], await Deno.readTextFile(UNIT));
});

Deno.test("systemd: every file the provider reads is readable by its DynamicUser", async () => {
  const unit = parseUnit(await Deno.readTextFile(UNIT));
  assert.deepEqual(unit.get("Service.DynamicUser"), ["yes"]);
  const argv = unit.get("Service.ExecStart")![0].split(/\s+/);
  assert.equal(argv[0], BINARY);
  const flags = new Map(
    argv.slice(1).map((a) => /^--([a-z-]+)=(.*)$/.exec(a)!).map((m) => [m[1], m[2]] as const),
  );
  const credentials = new Map(
    (unit.get("Service.LoadCredential") ?? []).map((c) => c.split(":") as [string, string]),
  );
  const used = FILE_FLAGS.filter((f) => flags.has(f));
  assert.ok(used.length >= 3, `file flags: ${used.join(" ")}`);
  for (const flag of used) {
    const path = flags.get(flag)!;
    // A DynamicUser reads only what systemd hands over: root's /etc/bigfleet is closed to it.
    const m = /^%d\/(.+)$/.exec(path);
    assert.ok(m, `--${flag}=${path} is not under the credentials directory %d`);
    assert.ok(credentials.has(m[1]), `--${flag}: no LoadCredential=${m[1]}:…`);
    assert.match(credentials.get(m[1])!, /^\/etc\/bigfleet\//);
  }
  const stateDir = unit.get("Service.StateDirectory")?.[0];
  assert.ok(stateDir, "a StateDirectory");
  assert.ok(
    flags.get("state")!.startsWith(`/var/lib/${stateDir}/`),
    `--state ${flags.get("state")} is in the StateDirectory /var/lib/${stateDir}`,
  );

  // And the command line is one the binary accepts, once the credentials exist.
  const dir = await Deno.makeTempDir({ prefix: "bf-systemd-" });
  try {
    const files = new Map<string, string>([
      ["pve-token", "00000000-0000-0000-0000-000000000000\n"],
      ["pve-root-ca.pem", (await makeCa(dir, "systemd-root")).certPem],
      ["offerings.json", JSON.stringify([{ instance_type: "pve.small", zone: "pve1", count: 1 }])],
    ]);
    const read = (p: string) => {
      const name = p.startsWith(`${dir}/`) ? p.slice(dir.length + 1) : "";
      const text = files.get(name);
      return text === undefined
        ? Promise.reject(new Deno.errors.NotFound(p))
        : Promise.resolve(text);
    };
    const config = await loadConfig(argv.slice(1).map((a) => a.replaceAll("%d", dir)), {
      readFile: read,
    });
    assert.equal(config.backend, "proxmox");
    assert.equal(config.slots.length, 1);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

const VERIFY_TEST = "systemd: systemd-analyze verify accepts the unit without a warning";

Deno.test({
  name: VERIFY_TEST,
  ignore: ignoreWithout(VERIFY_TEST, "systemd-analyze", "apt-get install systemd"),
  fn: async () => {
    let verify: Deno.CommandOutput;
    const dir = await Deno.makeTempDir({ prefix: "bf-systemd-" });
    try {
      // verify checks that ExecStart is executable: point it at a stand-in for the binary.
      const stub = `${dir}/bigfleet-proxmox`;
      await Deno.writeTextFile(stub, "#!/bin/sh\nexit 0\n", { mode: 0o755 });
      const unit = `${dir}/bigfleet-proxmox.service`;
      await Deno.writeTextFile(unit, (await Deno.readTextFile(UNIT)).replace(BINARY, stub));
      verify = await new Deno.Command("systemd-analyze", {
        args: ["verify", "--man=no", unit],
        stdout: "piped",
        stderr: "piped",
      }).output();
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
    const err = new TextDecoder().decode(verify.stderr);
    assert.ok(verify.success, err);
    assert.equal(err.trim(), "", "no warning");
  },
});
