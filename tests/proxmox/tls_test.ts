// TLS trust: CA mode, fingerprint pinning, both (verified node:tls
// connections in every mode). A wrong CA or pin must fail clearly with no authenticated
// request reaching the server, on the first connection and on every later one.

import assert from "node:assert/strict";
import { normaliseFingerprint } from "../../src/config/proxmox.ts";
import { createProxmoxBackend, TlsTrustError } from "../../src/proxmox/mod.ts";
import { verifiedTransport } from "../../src/proxmox/api/transport.ts";
import { type Simulator, startSimulator } from "../pvesim/mod.ts";
import {
  authed,
  captureLogs,
  configFor,
  FAST,
  rig,
  signal,
  slot,
  tcpRelay,
  vmidOf,
} from "./helpers.ts";

captureLogs();

async function expectRefused(sim: Simulator, over: Parameters<typeof configFor>[1], re: RegExp) {
  const err = await createProxmoxBackend(configFor(sim, over), { timing: FAST }).then(
    async (b) => {
      await b.close();
      return null;
    },
    (e) => e,
  );
  assert.ok(err instanceof TlsTrustError, `expected a TLS error, got ${err}`);
  assert.match(err.message, re);
  assert.equal(sim.requests.length, 0, "the server saw no HTTP request at all");
}

Deno.test("wrong CA, wrong pin, or one of two wrong: one clear error, no request sent", async () => {
  const sim = await startSimulator();
  try {
    const wrongPin = "00:" + sim.fingerprint.slice(3);
    await expectRefused(
      sim,
      { caPem: sim.wrongCaPem },
      /TLS verification of 127\.0\.0\.1:\d+ failed/,
    );
    await expectRefused(
      sim,
      { caPem: null, fingerprint: wrongPin },
      /TLS fingerprint mismatch for 127\.0\.0\.1:\d+: server presented [0-9A-F:]{95}, pinned 00:/,
    );
    await expectRefused(sim, { caPem: sim.caPem, fingerprint: wrongPin }, /fingerprint mismatch/);
    await expectRefused(
      sim,
      { caPem: sim.wrongCaPem, fingerprint: sim.fingerprint },
      /TLS verification/,
    );
  } finally {
    await sim.close();
  }
});

Deno.test("the transports refuse an unverified peer per request, before sending anything", async () => {
  const sim = await startSimulator();
  try {
    const url = new URL(sim.url + "/cluster/resources");
    const req = { method: "GET" as const, url, headers: { Authorization: sim.authHeader } };
    const pinned = verifiedTransport({
      caPem: null,
      fingerprint: "AA:" + sim.fingerprint.slice(3),
    });
    await assert.rejects(pinned.send(req, signal()), TlsTrustError);
    const ca = verifiedTransport({ caPem: sim.wrongCaPem, fingerprint: null });
    await assert.rejects(ca.send(req, signal()), TlsTrustError);
    ca.close();
    assert.equal(sim.requests.length, 0);
  } finally {
    await sim.close();
  }
});

for (
  const [label, over] of [
    ["fingerprint only", (s: Simulator) => ({ caPem: null, fingerprint: s.fingerprint })],
    ["CA and fingerprint", (s: Simulator) => ({ caPem: s.caPem, fingerprint: s.fingerprint })],
    [
      // As --proxmox-tls-fingerprint gives it: the configuration normalises it once.
      "bare-hex fingerprint",
      (s: Simulator) => ({
        caPem: null,
        fingerprint: normaliseFingerprint(s.fingerprint.replaceAll(":", "").toLowerCase()),
      }),
    ],
  ] as const
) {
  Deno.test(`full lifecycle over pinned TLS (${label})`, async () => {
    const sim = await startSimulator({
      timing: { cloneMs: 80, cloneNamelessMs: 20, taskMs: 10, agentBootMs: 40, execMs: 10 },
    });
    const backend = await createProxmoxBackend(configFor(sim, over(sim)), { timing: FAST });
    try {
      const s = slot("pve2");
      const { hostRef } = await backend.create(s, signal());
      const m = { machineId: s.machineId, hostRef };
      await backend.configure(
        m,
        { clusterId: "c", bootstrap: new Uint8Array(100_000).fill(65) },
        signal(),
      );
      await backend.delete(m, signal());
      assert.equal(sim.vm(vmidOf(hostRef)), undefined);
    } finally {
      await backend.close();
      await sim.close();
    }
  });
}

Deno.test("pinning ignores the hostname; CA mode checks it", async () => {
  // 127.0.0.2 is loopback but not in the leaf's SANs.
  const sim = await startSimulator({ host: "127.0.0.2" });
  try {
    await expectRefused(sim, { caPem: sim.caPem }, /TLS verification of 127\.0\.0\.2:\d+ failed/);
    const b = await createProxmoxBackend(
      configFor(sim, { caPem: null, fingerprint: sim.fingerprint }),
      { timing: FAST },
    );
    await b.describe(signal());
    await b.close();
  } finally {
    await sim.close();
  }
});

/**
 * An impostor in its own process, accepting the same token (so a request that
 * reached it would succeed). In-process simulators share TLS session-ticket
 * keys, which lets a client resume a session verified against the other
 * server: that is why the impostor must be a separate process.
 */
async function spawnImpostor(sim: Simulator) {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-all",
      new URL("../pvesim/main.ts", import.meta.url).pathname,
      "--port",
      "0",
      "--token-id",
      sim.tokenId,
      "--secret",
      sim.tokenSecret,
    ],
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let out = "";
  while (!/listening on https:\/\/[^:]+:(\d+)/.test(out)) {
    const { value, done } = await reader.read();
    if (done) throw new Error("impostor did not start");
    out += value;
  }
  reader.releaseLock();
  return {
    port: Number(/listening on https:\/\/[^:]+:(\d+)/.exec(out)![1]),
    async close() {
      child.kill("SIGINT");
      await child.status;
      await child.stdout.cancel().catch(() => {});
    },
  };
}

for (const mode of ["ca", "fingerprint"] as const) {
  Deno.test(`an impostor appearing after startup never sees the token (${mode} mode)`, async () => {
    const real = await startSimulator();
    const impostor = await spawnImpostor(real);
    const proxy = await tcpRelay(() => real.port);
    const over = mode === "ca"
      ? { caPem: real.caPem }
      : { caPem: null, fingerprint: real.fingerprint };
    const cfg = configFor(real, { ...over, apiUrl: `https://127.0.0.1:${proxy.port}/api2/json` });
    const backend = await createProxmoxBackend(cfg, { timing: FAST });
    try {
      await backend.describe(signal());
      assert.ok(authed(real).length > 0);
      proxy.swap(impostor.port);
      // Had the impostor received the request it would have answered 200 (same token).
      await assert.rejects(backend.describe(signal()), TlsTrustError);
    } finally {
      await backend.close();
      await proxy.close();
      await impostor.close();
      await real.close();
    }
  });
}

Deno.test("no TLS trust material at all is refused (there is no skip-verify)", async () => {
  await using r = await rig();
  // The rig's own backend checked --nodes at its start; nothing may follow.
  const before = r.sim.requests.length;
  await assert.rejects(
    createProxmoxBackend(configFor(r.sim, { caPem: null, fingerprint: null }), { timing: FAST }),
    /no TLS trust material/,
  );
  assert.equal(r.sim.requests.length, before, "nothing was sent unverified");
  // https-only URLs are the configuration's rule (tests/unit/config_backend_test.ts).
});
