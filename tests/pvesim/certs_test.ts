// Self-tests of the test PKI: v3 extensions present, chains verify, the
// fingerprint matches openssl's.

import assert from "node:assert/strict";
import { issueCert, makeCa, makeTestPki } from "./certs.ts";

async function x509Text(file: string, ...extra: string[]): Promise<string> {
  const out = await new Deno.Command("openssl", {
    args: ["x509", "-in", file, "-noout", ...extra],
    stdout: "piped",
    stderr: "piped",
  }).output();
  return new TextDecoder().decode(out.stdout);
}

async function verify(caFile: string, certFile: string): Promise<boolean> {
  const out = await new Deno.Command("openssl", {
    args: ["verify", "-CAfile", caFile, certFile],
    stdout: "piped",
    stderr: "piped",
  }).output();
  return out.success;
}

Deno.test("certs: server leaf is v3 with SANs and serverAuth; wrong CA does not verify it", async () => {
  const pki = await makeTestPki();
  try {
    const t = await x509Text(pki.server.certFile, "-text");
    assert.match(t, /Version: 3/);
    assert.match(t, /CA:FALSE/);
    assert.match(t, /TLS Web Server Authentication/);
    assert.match(t, /IP Address:127\.0\.0\.1/);
    assert.match(t, /DNS:localhost/);
    assert.match(await x509Text(pki.ca.certFile, "-text"), /CA:TRUE/);
    assert.ok(await verify(pki.ca.certFile, pki.server.certFile));
    assert.equal(await verify(pki.wrongCa.certFile, pki.server.certFile), false);
    const fp = await x509Text(pki.server.certFile, "-fingerprint", "-sha256");
    assert.equal(fp.trim().split("=")[1], pki.server.fingerprint);
  } finally {
    await Deno.remove(pki.dir, { recursive: true });
  }
});

Deno.test("certs: client cert with URI SAN and clientAuth", async () => {
  const dir = await Deno.makeTempDir({ prefix: "pvesim-certs-" });
  try {
    const ca = await makeCa(dir, "grpc-clients");
    const c = await issueCert(ca, {
      cn: "bigfleet-controller",
      usage: "client",
      uriSans: ["spiffe://bigfleet/controller"],
    });
    const t = await x509Text(c.certFile, "-text");
    assert.match(t, /TLS Web Client Authentication/);
    assert.match(t, /URI:spiffe:\/\/bigfleet\/controller/);
    assert.match(c.keyPem, /PRIVATE KEY/);
    assert.ok(await verify(ca.certFile, c.certFile));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
