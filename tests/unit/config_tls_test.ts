import assert from "node:assert/strict";
import { generateKeyPairSync } from "node:crypto";
import { loadConfig } from "../../src/config/load.ts";
import { hasCertificate, hasPrivateKey, pemLabels } from "../../src/config/pem.ts";
import { ConfigError } from "../../src/config/types.ts";

const CERT =
  "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUQ0VSVA==\n-----END CERTIFICATE-----\n";
const KEY = generateKeyPairSync("ec", { namedCurve: "prime256v1" }).privateKey.export({
  type: "pkcs8",
  format: "pem",
}) as string;

Deno.test("pem: block detection", () => {
  assert.deepEqual(pemLabels(CERT + KEY), ["CERTIFICATE", "PRIVATE KEY"]);
  assert.ok(hasCertificate("junk before\n" + CERT));
  assert.ok(hasPrivateKey(KEY));
  assert.ok(hasPrivateKey("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----"));
  assert.ok(
    hasPrivateKey("-----BEGIN EC PRIVATE KEY-----\r\nAAAA\r\n-----END EC PRIVATE KEY-----"),
  );
  assert.ok(!hasPrivateKey(CERT));
  assert.ok(!hasCertificate(KEY));
  assert.ok(!hasCertificate(""));
  assert.ok(!hasCertificate("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----"));
  assert.ok(!hasCertificate("-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----"));
  assert.ok(!hasCertificate("-----BEGIN CERTIFICATE-----\nAAAA\n-----END PRIVATE KEY-----"));
  assert.ok(
    !hasPrivateKey(
      "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----",
    ),
  );
});

async function withTls(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "config_tls_" });
  try {
    await Deno.writeTextFile(`${dir}/cert.pem`, CERT);
    await Deno.writeTextFile(`${dir}/key.pem`, KEY);
    await Deno.writeTextFile(`${dir}/ca.pem`, CERT);
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

async function rejects(argv: string[], re: RegExp): Promise<void> {
  await assert.rejects(loadConfig(["--use-fake-backend", ...argv]), (e: unknown) => {
    assert.ok(e instanceof ConfigError, `not a ConfigError: ${e}`);
    assert.match(e.message, re);
    assert.ok(!e.message.includes("PRIVATE KEY-----"), "key material leaked");
    return true;
  });
}

Deno.test("tls: cert + key give TLS, adding a CA gives mTLS", async () => {
  await withTls(async (dir) => {
    const tls = await loadConfig([
      "--use-fake-backend",
      `--tls-cert=${dir}/cert.pem`,
      `--tls-key=${dir}/key.pem`,
    ]);
    assert.deepEqual(tls.tls, { certPem: CERT, keyPem: KEY, caPem: null });
    const mtls = await loadConfig([
      "--use-fake-backend",
      "--tls-cert",
      `${dir}/cert.pem`,
      "-tls-key",
      `${dir}/key.pem`,
      `-tls-ca=${dir}/ca.pem`,
    ]);
    assert.equal(mtls.tls!.caPem, CERT);
  });
});

Deno.test("tls: half-configured or bad TLS is rejected naming the flag", async () => {
  await withTls(async (dir) => {
    const cases: [string[], RegExp][] = [
      [[`--tls-cert=${dir}/cert.pem`], /^--tls-cert: given without --tls-key/],
      [[`--tls-key=${dir}/key.pem`], /^--tls-key: given without --tls-cert/],
      [[`--tls-ca=${dir}/ca.pem`], /^--tls-ca: needs --tls-cert and --tls-key/],
      [
        [`--tls-ca=${dir}/ca.pem`, `--tls-cert=${dir}/cert.pem`],
        /^--tls-cert: given without --tls-key/,
      ],
      [[`--tls-cert=${dir}/none.pem`, `--tls-key=${dir}/key.pem`], /^--tls-cert: cannot read/],
      [[`--tls-cert=${dir}/cert.pem`, `--tls-key=${dir}/none.pem`], /^--tls-key: cannot read/],
      [
        [`--tls-cert=${dir}/key.pem`, `--tls-key=${dir}/key.pem`],
        /^--tls-cert: ".*key.pem" holds no PEM CERTIFICATE block/,
      ],
      [
        [`--tls-cert=${dir}/cert.pem`, `--tls-key=${dir}/cert.pem`],
        /^--tls-key: ".*cert.pem" holds no PEM PRIVATE KEY block/,
      ],
      [
        [`--tls-cert=${dir}/cert.pem`, `--tls-key=${dir}/key.pem`, `--tls-ca=${dir}/key.pem`],
        /^--tls-ca: ".*" holds no PEM CERTIFICATE block/,
      ],
    ];
    for (const [argv, re] of cases) await rejects(argv, re);
  });
});
