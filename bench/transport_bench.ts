// Cost of one authenticated API read (GET /cluster/resources) against the
// Proxmox simulator, per transport: the verified node:tls transport with
// kept-alive connections (what the provider uses in every trust mode), the
// same without reuse (a TLS handshake per request), and Deno's fetch with
// `caCerts` (what CA mode used before; it also trusts the runtime's roots,
// so it is here only as the baseline). Figures in bench/RESULTS.md.

import { type RawRequest, verifiedTransport } from "../src/proxmox/api/transport.ts";
import { startSimulator } from "../tests/pvesim/mod.ts";

const sim = await startSimulator();
const url = new URL(sim.url + "/cluster/resources?type=vm");
const req: RawRequest = { method: "GET", url, headers: { Authorization: sim.authHeader } };
const signal = new AbortController().signal;

const pooled = verifiedTransport({ caPem: sim.caPem, fingerprint: null });
const pinnedPooled = verifiedTransport({ caPem: null, fingerprint: sim.fingerprint });
const fresh = verifiedTransport({ caPem: sim.caPem, fingerprint: null }, {
  maxIdle: 0,
  idleMs: 0,
});
const client = Deno.createHttpClient({ caCerts: [sim.caPem] });

async function must(p: Promise<{ status: number }>): Promise<void> {
  const r = await p;
  if (r.status !== 200) throw new Error(`status ${r.status}`);
}

Deno.bench(
  "GET over verified TLS, kept alive (CA)",
  { group: "read", baseline: true },
  () => must(pooled.send(req, signal)),
);
Deno.bench(
  "GET over verified TLS, kept alive (pin)",
  { group: "read" },
  () => must(pinnedPooled.send(req, signal)),
);
Deno.bench(
  "GET over verified TLS, new handshake each",
  { group: "read" },
  () => must(fresh.send(req, signal)),
);
Deno.bench("GET over fetch + caCerts (old CA mode)", { group: "read" }, async () => {
  const r = await fetch(url, { headers: req.headers, client });
  await r.arrayBuffer();
  if (r.status !== 200) throw new Error(`status ${r.status}`);
});

globalThis.addEventListener("unload", () => {
  pooled.close();
  pinnedPooled.close();
  fresh.close();
  client.close();
  void sim.close();
});
