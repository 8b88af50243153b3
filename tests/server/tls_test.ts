// The gRPC listener's TLS modes with real certificates (made here with
// openssl) and real clients: TLS 1.3 minimum with ALPN h2, mTLS refusing a
// missing or foreign client certificate, and the shard-identity check.

import assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import * as tls from "node:tls";
import { issueCert, makeCa } from "../pvesim/certs.ts";
import type { CertAuthority, IssuedCert } from "../pvesim/certs.ts";
import { runUntilExit, startProvider } from "../harness/process.ts";
import type { ProviderProcess } from "../harness/process.ts";
import {
  lifecycle,
  logLines,
  RawClient,
  type RpcResult,
  tlsCreds,
  waitForServing,
} from "./helpers.ts";
import { parseSubjectAltNames } from "../../src/server/identity.ts";

interface Pki {
  serverCa: CertAuthority;
  server: IssuedCert;
  clientCa: CertAuthority;
  /** Client certs signed by clientCa. */
  shardA: IssuedCert;
  shardB: IssuedCert;
  plain: IssuedCert;
  /** A client cert from a CA the provider does not trust. */
  foreign: IssuedCert;
}

let pkiPromise: Promise<Pki> | undefined;
function pki(): Promise<Pki> {
  return pkiPromise ??= (async () => {
    const dir = await Deno.makeTempDir({ prefix: "server-tls-" });
    const serverCa = await makeCa(dir, "grpc-server-root");
    const clientCa = await makeCa(dir, "grpc-client-root");
    const foreignCa = await makeCa(dir, "foreign-root");
    const client = (ca: CertAuthority, name: string, uriSans: string[] = []) =>
      issueCert(ca, { cn: name, usage: "client", uriSans, name });
    return {
      serverCa,
      server: await issueCert(serverCa, {
        cn: "provider",
        sans: ["127.0.0.1", "localhost"],
        usage: "server",
        name: "provider-server",
      }),
      clientCa,
      shardA: await client(clientCa, "shard-a", ["bigfleet://shard/shard-a"]),
      shardB: await client(clientCa, "shard-b", ["bigfleet://shard/shard-b"]),
      plain: await client(clientCa, "operator"),
      foreign: await client(foreignCa, "intruder", ["bigfleet://shard/shard-a"]),
    };
  })();
}

async function startTls(mtls: boolean): Promise<ProviderProcess> {
  const p = await pki();
  const args = [
    "--use-fake-backend",
    "--seed-count=8",
    "--metrics-addr=",
    `--tls-cert=${p.server.certFile}`,
    `--tls-key=${p.server.keyFile}`,
  ];
  if (mtls) args.push(`--tls-ca=${p.clientCa.certFile}`);
  return await startProvider({ args });
}

async function securityOf(proc: ProviderProcess): Promise<unknown> {
  return (await waitForServing(proc)).security;
}

/** A raw TLS handshake: the protocol and ALPN agreed, or the error. */
function handshake(
  port: number,
  caPem: string,
  opts: tls.ConnectionOptions = {},
): Promise<{ protocol: string | null; alpn: string | false | null } | { error: string }> {
  return new Promise((resolve) => {
    const sock = tls.connect({
      host: "127.0.0.1",
      port,
      servername: "localhost",
      ca: [caPem],
      ALPNProtocols: ["h2"],
      ...opts,
    }, () => {
      const res = { protocol: sock.getProtocol(), alpn: sock.alpnProtocol };
      sock.end();
      resolve(res);
    });
    sock.on("error", (e) => resolve({ error: e.message }));
  });
}

async function withClient<T>(
  port: number,
  creds: grpc.ChannelCredentials,
  fn: (c: RawClient) => Promise<T>,
): Promise<T> {
  const c = new RawClient(`localhost:${port}`, creds);
  try {
    return await fn(c);
  } finally {
    c.close();
  }
}

function code(r: RpcResult): number {
  return r.ok ? 0 : r.code;
}

async function firstMachineId(c: RawClient): Promise<string> {
  const r = await c.call("List", { states: [1], max_results: 1 });
  assert.ok(r.ok, JSON.stringify(r));
  return (r.value.machines as { id: string }[])[0].id;
}

Deno.test("tls: TLS 1.3 with ALPN h2; plaintext and TLS 1.2 clients refused", async () => {
  const p = await pki();
  const proc = await startTls(false);
  try {
    assert.equal(await securityOf(proc), "TLS");
    const listed = await withClient(
      proc.port,
      tlsCreds(p.serverCa.certPem),
      (c) => c.call("List", {}),
    );
    assert.ok(listed.ok, JSON.stringify(listed));

    const plain = await withClient(
      proc.port,
      grpc.credentials.createInsecure(),
      (c) => c.call("List", {}, 3_000),
    );
    assert.equal(code(plain), grpc.status.UNAVAILABLE, "plaintext refused");

    assert.deepEqual(await handshake(proc.port, p.serverCa.certPem), {
      protocol: "TLSv1.3",
      alpn: "h2",
    });
    const old = await handshake(proc.port, p.serverCa.certPem, { maxVersion: "TLSv1.2" });
    assert.ok("error" in old, "TLS 1.2 client refused");
    assert.match(old.error, /protocol ?version/i);
  } finally {
    await proc.stop();
  }
});

Deno.test("tls: mTLS refuses a missing or foreign client certificate before any handler", async () => {
  const p = await pki();
  const proc = await startTls(true);
  try {
    assert.equal(await securityOf(proc), "mTLS");
    const none = await withClient(
      proc.port,
      tlsCreds(p.serverCa.certPem),
      (c) => c.call("List", {}, 3_000),
    );
    assert.equal(code(none), grpc.status.UNAVAILABLE, "no client certificate");
    const foreign = await withClient(
      proc.port,
      tlsCreds(p.serverCa.certPem, p.foreign),
      (c) => c.call("List", {}, 3_000),
    );
    assert.equal(code(foreign), grpc.status.UNAVAILABLE, "foreign client certificate");
    const ok = await withClient(
      proc.port,
      tlsCreds(p.serverCa.certPem, p.plain),
      (c) => c.call("List", {}),
    );
    assert.ok(ok.ok, JSON.stringify(ok));
    const old = await handshake(proc.port, p.serverCa.certPem, {
      maxVersion: "TLSv1.2",
      cert: p.plain.certPem,
      key: p.plain.keyPem,
    });
    assert.ok("error" in old, "TLS 1.2 refused under mTLS too");
    // None of the refused connections reached a handler.
    const handled = logLines(proc.stderr()).filter((l) => l.logger === "bigfleet.rpc");
    assert.equal(handled.length, 0);
  } finally {
    await proc.stop();
  }
});

Deno.test("tls: a shard certificate cannot act in another shard's name; the mark stays put", async () => {
  const p = await pki();
  const proc = await startTls(true);
  const ca = p.serverCa.certPem;
  const asA = new RawClient(`localhost:${proc.port}`, tlsCreds(ca, p.shardA));
  const asB = new RawClient(`localhost:${proc.port}`, tlsCreds(ca, p.shardB));
  const asPlain = new RawClient(`localhost:${proc.port}`, tlsCreds(ca, p.plain));
  try {
    const id = await firstMachineId(asA);
    // shard-a's certificate stamping shard-b's id: refused before the kit.
    const forged = await asA.call("Create", lifecycle(id, "shard-b", 1, 5));
    assert.equal(code(forged), grpc.status.PERMISSION_DENIED, JSON.stringify(forged));
    assert.match(!forged.ok ? forged.details : "", /shard-a/);
    const unstamped = await asA.call("Create", lifecycle(id, "", 0, 0));
    assert.equal(code(unstamped), grpc.status.PERMISSION_DENIED, "unfenced call from a shard cert");
    for (const method of ["Configure", "Drain", "Delete"]) {
      const r = await asA.call(method, lifecycle(id, "shard-b", 1, 5));
      assert.equal(code(r), grpc.status.PERMISSION_DENIED, method);
    }
    // Reads are not restricted.
    assert.ok((await asA.call("Get", { id })).ok);
    assert.ok((await asA.call("List", {})).ok);

    // The very same token from shard-b's own identity is accepted: the
    // refused calls moved no fence mark.
    const real = await asB.call("Create", lifecycle(id, "shard-b", 1, 5));
    assert.ok(real.ok, JSON.stringify(real));
    // And now the mark is real: the same token again is fenced.
    const replay = await asB.call("Drain", lifecycle(id, "shard-b", 1, 5));
    assert.equal(code(replay), grpc.status.FAILED_PRECONDITION);

    // A certificate without a shard SAN is not restricted.
    const other = await firstMachineId(asPlain);
    const free = await asPlain.call("Create", lifecycle(other, "any-shard", 1, 1));
    assert.ok(free.ok, JSON.stringify(free));
    // shard-a acting as itself works.
    const third = await firstMachineId(asA);
    assert.ok((await asA.call("Create", lifecycle(third, "shard-a", 1, 1))).ok);
  } finally {
    asA.close();
    asB.close();
    asPlain.close();
    await proc.stop();
  }
});

Deno.test("tls: half-configured TLS flags refuse to start and serve nothing", async () => {
  const p = await pki();
  const cases = [
    [`--tls-ca=${p.clientCa.certFile}`],
    [`--tls-cert=${p.server.certFile}`],
    [`--tls-key=${p.server.keyFile}`],
  ];
  for (const flags of cases) {
    const res = await runUntilExit(["--use-fake-backend", "--metrics-addr=", ...flags]);
    assert.equal(res.code, 2, flags.join(" "));
    assert.match(res.stderr, /^error: .*tls-/m);
  }
});

Deno.test("tls: subjectaltname parsing keeps quoted names whole", () => {
  assert.deepEqual(parseSubjectAltNames("DNS:localhost, URI:bigfleet://shard/a"), [
    "DNS:localhost",
    "URI:bigfleet://shard/a",
  ]);
  assert.deepEqual(
    parseSubjectAltNames('URI:"bigfleet://shard/a, URI:bigfleet://shard/b", IP Address:127.0.0.1'),
    ["URI:bigfleet://shard/a, URI:bigfleet://shard/b", "IP Address:127.0.0.1"],
  );
  assert.deepEqual(parseSubjectAltNames(""), []);
});
