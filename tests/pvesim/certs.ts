// Test PKI made with the openssl CLI. Certificates are X.509 v3 with
// basicConstraints, keyUsage, extendedKeyUsage and subjectAltName, because
// rustls (Deno's TLS stack) rejects v1 certificates with a bare reset.
// Reusable beyond the simulator: gRPC server and client certs use it too.

import { join } from "node:path";

export interface CertAuthority {
  name: string;
  certPem: string;
  keyPem: string;
  certFile: string;
  keyFile: string;
}

export interface IssuedCert {
  certPem: string;
  keyPem: string;
  certFile: string;
  keyFile: string;
  /** SHA-256 of the DER certificate, "AB:CD:..." upper-case. */
  fingerprint: string;
}

export interface IssueOptions {
  cn: string;
  /** "127.0.0.1", "localhost", or prefixed "IP:…", "DNS:…", "URI:…". */
  sans?: string[];
  usage: "server" | "client";
  uriSans?: string[];
  /** File name stem; defaults to a sanitised cn plus usage. */
  name?: string;
  days?: number;
}

// EC P-256 keys: quick to make, accepted by rustls, node:tls and grpc-js.
const NEW_EC_KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];

async function openssl(args: string[], cwd: string): Promise<void> {
  const out = await new Deno.Command("openssl", { args, cwd, stdout: "piped", stderr: "piped" })
    .output();
  if (!out.success) {
    const err = new TextDecoder().decode(out.stderr);
    throw new Error(`openssl ${args[0]} failed: ${err}`);
  }
}

function stem(s: string): string {
  return s.replace(/[^A-Za-z0-9_.-]/g, "_");
}

/** Creates a self-signed CA (EC P-256) in dir; files are `<name>-ca.pem` / `<name>-ca.key`. */
export async function makeCa(dir: string, name: string): Promise<CertAuthority> {
  await Deno.mkdir(dir, { recursive: true });
  const certFile = join(dir, `${stem(name)}-ca.pem`);
  const keyFile = join(dir, `${stem(name)}-ca.key`);
  await openssl([
    "req",
    "-x509",
    "-new",
    ...NEW_EC_KEY,
    "-keyout",
    keyFile,
    "-out",
    certFile,
    "-days",
    "3650",
    "-sha256",
    "-subj",
    `/CN=${name}`,
    "-addext",
    "basicConstraints=critical,CA:TRUE",
    "-addext",
    "keyUsage=critical,keyCertSign,cRLSign",
    "-addext",
    "subjectKeyIdentifier=hash",
  ], dir);
  return {
    name,
    certFile,
    keyFile,
    certPem: await Deno.readTextFile(certFile),
    keyPem: await Deno.readTextFile(keyFile),
  };
}

function sanEntry(s: string): string {
  if (/^(IP|DNS|URI|email):/.test(s)) return s;
  if (/^\d{1,3}(\.\d{1,3}){3}$/.test(s) || s.includes(":")) return `IP:${s}`;
  return `DNS:${s}`;
}

/** Issues a leaf certificate signed by ca, written next to the CA files. */
export async function issueCert(ca: CertAuthority, opts: IssueOptions): Promise<IssuedCert> {
  const dir = ca.certFile.slice(0, ca.certFile.lastIndexOf("/"));
  const base = stem(opts.name ?? `${opts.cn}-${opts.usage}`);
  const certFile = join(dir, `${base}.pem`);
  const keyFile = join(dir, `${base}.key`);
  const csrFile = join(dir, `${base}.csr`);
  const extFile = join(dir, `${base}.ext`);
  const sans = [...(opts.sans ?? []).map(sanEntry), ...(opts.uriSans ?? []).map((u) => `URI:${u}`)];
  const ext = [
    "basicConstraints=critical,CA:FALSE",
    "keyUsage=critical,digitalSignature,keyEncipherment,keyAgreement",
    `extendedKeyUsage=${opts.usage === "server" ? "serverAuth" : "clientAuth"}`,
    "subjectKeyIdentifier=hash",
    "authorityKeyIdentifier=keyid",
  ];
  if (sans.length > 0) ext.push(`subjectAltName=${sans.join(",")}`);
  await Deno.writeTextFile(extFile, ext.join("\n") + "\n");
  await openssl([
    "req",
    "-new",
    ...NEW_EC_KEY,
    "-keyout",
    keyFile,
    "-out",
    csrFile,
    "-subj",
    `/CN=${opts.cn}`,
  ], dir);
  // A random serial keeps re-issued certs distinct without a serial file.
  const serial = "0x" + Array.from(crypto.getRandomValues(new Uint8Array(12)))
    .map((b) => b.toString(16).padStart(2, "0")).join("").replace(/^0/, "1");
  await openssl([
    "x509",
    "-req",
    "-in",
    csrFile,
    "-CA",
    ca.certFile,
    "-CAkey",
    ca.keyFile,
    "-set_serial",
    serial,
    "-days",
    String(opts.days ?? 825),
    "-sha256",
    "-extfile",
    extFile,
    "-out",
    certFile,
  ], dir);
  const certPem = await Deno.readTextFile(certFile);
  return {
    certPem,
    certFile,
    keyFile,
    keyPem: await Deno.readTextFile(keyFile),
    fingerprint: await pemFingerprint(certPem),
  };
}

/** DER bytes of the first certificate in a PEM text. */
export function pemToDer(pem: string): Uint8Array {
  const m = pem.match(/-----BEGIN CERTIFICATE-----([\s\S]*?)-----END CERTIFICATE-----/);
  if (!m) throw new Error("no certificate in PEM");
  const bin = atob(m[1].replace(/\s+/g, ""));
  return Uint8Array.from(bin, (c) => c.charCodeAt(0));
}

/** SHA-256 fingerprint in the "AB:CD:…" form PVE and node:tls show. */
export async function pemFingerprint(pem: string): Promise<string> {
  const der = pemToDer(pem);
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", der as BufferSource));
  return Array.from(digest, (b) => b.toString(16).padStart(2, "0").toUpperCase()).join(":");
}

export interface TestPki {
  dir: string;
  ca: CertAuthority;
  /** Leaf for 127.0.0.1 / localhost / ::1, signed by ca. */
  server: IssuedCert;
  /** An unrelated CA for negative tests: nothing it trusts chains to ca. */
  wrongCa: CertAuthority;
}

/** CA + server leaf + unrelated CA in a fresh temp dir (or dir). */
export async function makeTestPki(dir?: string): Promise<TestPki> {
  const d = dir ?? await Deno.makeTempDir({ prefix: "pvesim-pki-" });
  const ca = await makeCa(d, "pvesim-root");
  const wrongCa = await makeCa(d, "pvesim-wrong");
  const server = await issueCert(ca, {
    cn: "pvesim",
    sans: ["127.0.0.1", "localhost", "::1"],
    usage: "server",
    name: "pvesim-server",
  });
  return { dir: d, ca, server, wrongCa };
}
