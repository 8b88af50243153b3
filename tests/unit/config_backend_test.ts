import assert from "node:assert/strict";
import { roomPolicy } from "../../src/config/room.ts";
import { loadConfig } from "../../src/config/load.ts";
import { ConfigError } from "../../src/config/types.ts";

const CERT =
  "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ0VSVA==\n-----END CERTIFICATE-----\n";
const SECRET = "5e3c1f0a-aaaa-bbbb-cccc-0123456789ab";
const PIN = "ab".repeat(32);

/** A temp dir with a CA file and a token file, removed after `fn`. */
async function withFiles(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "config_backend_" });
  try {
    await Deno.writeTextFile(`${dir}/ca.pem`, CERT);
    await Deno.writeTextFile(`${dir}/token`, `${SECRET}\n`);
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function realArgv(dir: string): string[] {
  return [
    "--proxmox-api-url=https://pve1.example:8006/api2/json",
    "--proxmox-token-id=bigfleet@pve!autoscaler",
    `--proxmox-token-file=${dir}/token`,
    `--proxmox-ca-file=${dir}/ca.pem`,
    "--nodes=pve1,pve2,pve3",
    "--proxmox-pool=bigfleet",
  ];
}

/** Rejects with a one-line ConfigError matching `re` that never contains the secret. */
async function rejects(argv: string[], re: RegExp): Promise<void> {
  await assert.rejects(loadConfig(argv), (e: unknown) => {
    assert.ok(e instanceof ConfigError, `not a ConfigError: ${e}`);
    assert.match(e.message, re);
    assert.ok(!e.message.includes(SECRET), "secret leaked into the message");
    assert.ok(!e.message.includes("\n"));
    return true;
  });
}

Deno.test("backend: a complete real configuration", async () => {
  await withFiles(async (dir) => {
    const c = await loadConfig(realArgv(dir));
    assert.equal(c.backend, "proxmox");
    assert.deepEqual(c.proxmox, {
      apiUrl: "https://pve1.example:8006/api2/json",
      tokenId: "bigfleet@pve!autoscaler",
      tokenSecret: SECRET,
      tokenFile: `${dir}/token`,
      caPem: CERT,
      fingerprint: null,
      pool: "bigfleet",
      nodes: ["pve1", "pve2", "pve3"],
      tags: ["bigfleet"],
      callsPerNode: 2,
      clonesPerStorage: 2,
      room: roomPolicy({}, ["pve1", "pve2", "pve3"]),
    });
    // Built-in offerings use the first two nodes.
    assert.deepEqual(c.zones, ["pve1", "pve2"]);
    assert.deepEqual([...new Set(c.slots.map((s) => s.zone))], ["pve1", "pve2"]);
    assert.equal(c.slots[0].id, "proxmox/OnDemand/pve.large/pve1/000");
  });
});

Deno.test("backend: explicit --proxmox-backend=proxmox, Go-style single dash", async () => {
  await withFiles(async (dir) => {
    const argv = realArgv(dir).map((a) => a.slice(1));
    const c = await loadConfig(["-proxmox-backend", "proxmox", ...argv]);
    assert.equal(c.backend, "proxmox");
  });
});

Deno.test("backend: one node gives two buckets", async () => {
  await withFiles(async (dir) => {
    const c = await loadConfig([...realArgv(dir), "--nodes=solo", "--seed-count=5"]);
    assert.deepEqual(c.slots.map((s) => s.id), [
      "proxmox/OnDemand/pve.large/solo/000",
      "proxmox/OnDemand/pve.large/solo/001",
      "proxmox/OnDemand/pve.large/solo/002",
      "proxmox/OnDemand/pve.xlarge/solo/000",
      "proxmox/OnDemand/pve.xlarge/solo/001",
    ]);
  });
});

Deno.test("backend: the token file wins over the inline secret", async () => {
  await withFiles(async (dir) => {
    const c = await loadConfig([...realArgv(dir), "--proxmox-token-secret=inline-secret"]);
    assert.equal(c.proxmox!.tokenSecret, SECRET);
    const argv = realArgv(dir).filter((a) => !a.startsWith("--proxmox-token-file"));
    const inline = await loadConfig([...argv, "--proxmox-token-secret=inline-secret"]);
    assert.equal(inline.proxmox!.tokenSecret, "inline-secret");
  });
});

Deno.test("backend: a fingerprint alone is enough trust and is normalised", async () => {
  await withFiles(async (dir) => {
    const argv = realArgv(dir).filter((a) => !a.startsWith("--proxmox-ca-file"));
    const c = await loadConfig([...argv, `--proxmox-tls-fingerprint=${PIN}`]);
    assert.equal(c.proxmox!.caPem, null);
    assert.equal(c.proxmox!.fingerprint, Array(32).fill("AB").join(":"));
    const both = await loadConfig([...realArgv(dir), `--proxmox-tls-fingerprint=${PIN}`]);
    assert.equal(both.proxmox!.caPem, CERT);
    assert.ok(both.proxmox!.fingerprint);
  });
});

Deno.test("backend: --proxmox-tags: tags and @machine, de-duplicated; empty is none; bad ones named", async () => {
  await withFiles(async (dir) => {
    const tags = async (v: string) =>
      (await loadConfig([...realArgv(dir), `--proxmox-tags=${v}`])).proxmox?.tags;
    assert.deepEqual(await tags("fleet-a, @machine,fleet-a"), ["fleet-a", "@machine"]);
    assert.deepEqual(await tags(""), []);
    await rejects(
      [...realArgv(dir), "--proxmox-tags=bigfleet,Big Fleet"],
      /^--proxmox-tags: "Big Fleet" is not a Proxmox tag .*@machine/,
    );
  });
});

Deno.test("backend: missing or bad real-backend settings", async () => {
  await withFiles(async (dir) => {
    const without = (prefix: string) => realArgv(dir).filter((a) => !a.startsWith(prefix));
    const cases: [string[], RegExp][] = [
      [
        ["--proxmox-backend=proxmox", ...without("--proxmox-api-url")],
        /^--proxmox-api-url: is required/,
      ],
      [
        [...realArgv(dir), "--proxmox-api-url=http://pve1:8006"],
        /^--proxmox-api-url: must be an https/,
      ],
      [without("--proxmox-token-id"), /^--proxmox-token-id: is required/],
      [
        [...realArgv(dir), "--proxmox-token-id=bigfleet"],
        /^--proxmox-token-id: want USER@REALM!TOKENID/,
      ],
      [without("--proxmox-token-file"), /^no Proxmox token secret: set --proxmox-token-file/],
      [
        [...realArgv(dir), `--proxmox-token-file=${dir}/nope`],
        /^--proxmox-token-file: cannot read/,
      ],
      [
        [...realArgv(dir), `--proxmox-token-file=${dir}/ca.pem`],
        /^--proxmox-token-file: line 1: token secret contains/,
      ],
      [
        [...without("--proxmox-token-file"), `--proxmox-token-secret=${SECRET} x`],
        /^--proxmox-token-secret: /,
      ],
      [without("--nodes"), /^--nodes: is required/],
      [[...realArgv(dir), "--nodes=pve1,pve1"], /^--nodes: node "pve1" listed twice/],
      [[...realArgv(dir), "--nodes=pve1,,pve2"], /^--nodes: empty node name/],
      [[...realArgv(dir), "--nodes=a/b"], /^--nodes: .*"\/"/],
      [
        without("--proxmox-ca-file"),
        /^no TLS trust for the Proxmox API: set --proxmox-ca-file or --proxmox-tls-fingerprint/,
      ],
      [
        [...realArgv(dir), `--proxmox-ca-file=${dir}/token`],
        /^--proxmox-ca-file: ".*token" holds no PEM CERTIFICATE block/,
      ],
      [
        [...realArgv(dir), `--proxmox-ca-file=${dir}/missing.pem`],
        /^--proxmox-ca-file: cannot read/,
      ],
      [
        [...realArgv(dir), "--proxmox-tls-fingerprint=abc"],
        /^--proxmox-tls-fingerprint: want a SHA-256/,
      ],
    ];
    for (const [argv, re] of cases) await rejects(argv, re);
  });
});

Deno.test("backend: empty token file is rejected without echoing", async () => {
  await withFiles(async (dir) => {
    await Deno.writeTextFile(`${dir}/token`, "\n");
    await rejects(realArgv(dir), /^--proxmox-token-file: token secret is empty$/);
  });
});

Deno.test("backend: offerings must stay on --nodes", async () => {
  await withFiles(async (dir) => {
    const offers = `${dir}/offerings.json`;
    await Deno.writeTextFile(
      offers,
      JSON.stringify([
        { instance_type: "pve.small", zone: "pve3", count: 2 },
        { instance_type: "pve.small", zone: "pve1", count: 1, labels: { role: "worker" } },
      ]),
    );
    const c = await loadConfig([...realArgv(dir), `--offerings=${offers}`]);
    assert.deepEqual(c.zones, ["pve3", "pve1"]);
    assert.deepEqual(c.slots.map((s) => s.id), [
      "proxmox/OnDemand/pve.small/pve3/000",
      "proxmox/OnDemand/pve.small/pve3/001",
      "proxmox/OnDemand/pve.small/pve1/000",
    ]);
    await Deno.writeTextFile(
      offers,
      '[{"instance_type": "pve.small", "zone": "pve9", "count": 1}]',
    );
    await rejects(
      [...realArgv(dir), `--offerings=${offers}`],
      /^--offerings: .*zone "pve9" is not one of --nodes/,
    );
  });
});

Deno.test("backend: a token file may name its token id (USER@REALM!TOKENID=SECRET), which wins", async () => {
  await withFiles(async (dir) => {
    await Deno.writeTextFile(`${dir}/token`, `bigfleet@pve!autoscaler-r2=${SECRET}\n`);
    const c = await loadConfig(realArgv(dir));
    assert.equal(c.proxmox?.tokenId, "bigfleet@pve!autoscaler-r2");
    assert.equal(c.proxmox?.tokenSecret, SECRET);
    const noFlag = realArgv(dir).filter((a) => !a.startsWith("--proxmox-token-id"));
    assert.equal((await loadConfig(noFlag)).proxmox?.tokenId, "bigfleet@pve!autoscaler-r2");
    await Deno.writeTextFile(`${dir}/token`, `not-an-id=${SECRET}\n`);
    await rejects(realArgv(dir), /--proxmox-token-file: holds an '=' but no USER@REALM!TOKENID/);
    await Deno.writeTextFile(`${dir}/token`, `${SECRET}\n`);
    await rejects(noFlag, /--proxmox-token-id: is required .*TOKENID=SECRET/);
  });
});

Deno.test("backend: a token file after a rotation holds the new token first, then the retiring ones", async () => {
  await withFiles(async (dir) => {
    const old = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";
    await Deno.writeTextFile(
      `${dir}/token`,
      `bigfleet@pve!autoscaler-r2=${SECRET}\r\n\nbigfleet@pve!autoscaler=${old}\n`,
    );
    const c = await loadConfig(realArgv(dir));
    assert.equal(c.proxmox?.tokenId, "bigfleet@pve!autoscaler-r2", "the first line is in use");
    assert.equal(c.proxmox?.tokenSecret, SECRET);
    // A later line may be a secret alone (the --proxmox-token-id token), once.
    await Deno.writeTextFile(`${dir}/token`, `bigfleet@pve!autoscaler-r2=${SECRET}\n${old}\n`);
    assert.equal((await loadConfig(realArgv(dir))).proxmox?.tokenId, "bigfleet@pve!autoscaler-r2");
    const bad: [string, RegExp][] = [
      [`${SECRET}\n${old}\n`, /more than one line holds a secret alone/],
      [`x@pve!a=${SECRET}\nx@pve!a=${old}\n`, /token x@pve!a is listed twice/],
      [`x@pve!a=${SECRET}\nnot-an-id=${old}\n`, /line 2: holds an '=' but no USER@REALM!TOKENID/],
      [`x@pve!a=${SECRET}\nx@pve!b=${old} trailing\n`, /line 2: .*whitespace/],
    ];
    for (const [content, want] of bad) {
      await Deno.writeTextFile(`${dir}/token`, content);
      await rejects(realArgv(dir), want);
      try {
        await loadConfig(realArgv(dir));
      } catch (e) {
        assert.ok(!String(e).includes(old) && !String(e).includes(SECRET), "no secret echoed");
      }
    }
  });
});

Deno.test("backend: the load bounds on the cluster, 0 for none, bad values refused", async () => {
  await withFiles(async (dir) => {
    const c = await loadConfig([
      ...realArgv(dir),
      "--proxmox-calls-per-node=1",
      "--proxmox-clones-per-storage=0",
    ]);
    assert.equal(c.proxmox!.callsPerNode, 1);
    assert.equal(c.proxmox!.clonesPerStorage, 0);
    for (const flag of ["proxmox-calls-per-node", "proxmox-clones-per-storage"]) {
      for (const bad of ["-1", "two", "1.5", "65", ""]) {
        await rejects(
          [...realArgv(dir), `--${flag}=${bad}`],
          new RegExp(`^--${flag}: want a whole number from 0 \\(no limit\\) to 64, got`),
        );
      }
    }
  });
});

Deno.test("backend: --proxmox-vmid-range is kept as [lower, upper); a bad one is one line", async () => {
  await withFiles(async (dir) => {
    const c = await loadConfig([...realArgv(dir), "--proxmox-vmid-range=20000-29999"]);
    assert.deepEqual(c.proxmox!.vmidRange, { lower: 20000, upper: 30000 });
    await rejects(
      [...realArgv(dir), "--proxmox-vmid-range=29999-20000"],
      /^--proxmox-vmid-range: 29999 is above 20000: want FIRST-LAST, lowest first$/,
    );
  });
});

Deno.test("backend: a per-zone storage may only name --nodes", async () => {
  await withFiles(async (dir) => {
    const types = `${dir}/types.json`;
    await Deno.writeTextFile(
      types,
      JSON.stringify({
        "pve.small": { vcpu: 2, memory_mib: 2048, storage: { pve9: "local-lvm" } },
      }),
    );
    await rejects(
      [...realArgv(dir), `--instance-types=${types}`],
      /^--instance-types: storage of "pve\.small" names zone "pve9", which is not one of --nodes \(pve1,pve2,pve3\)$/,
    );
  });
});
