// Trust is exclusive: the provider process trusts only the configured CA
// and/or pinned fingerprint, never the runtime's extra roots (DENO_CERT,
// DENO_TLS_CA_STORE) and never a proxy from the environment. Each test runs
// the real provider process with that environment and watches where its
// requests go.

import assert from "node:assert/strict";
import net from "node:net";
import { spawnProvider, startProvider, waitFor } from "../harness/mod.ts";
import { issueCert, makeCa, startSimulator } from "../pvesim/mod.ts";
import type { Simulator } from "../pvesim/mod.ts";
import { authed, providerArgs, tcpRelay } from "./helpers.ts";

const T = { sanitizeOps: false, sanitizeResources: false };

/** A listening "proxy" that records every connection and the first bytes it got. */
async function proxyCatcher() {
  const seen: string[] = [];
  const server = net.createServer((c) => {
    seen.push("connect");
    c.on("data", (d) => seen.push(String(d).split("\r\n")[0]));
    c.on("error", () => {});
    setTimeout(() => c.destroy(), 200);
  });
  await new Promise<void>((f) => server.listen(0, "127.0.0.1", f));
  return {
    url: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`,
    seen,
    close: () => new Promise<void>((f) => server.close(() => f())),
  };
}

/** The impostor in its own process, with a certificate from its own CA. */
async function spawnImpostor(dir: string) {
  const ca = await makeCa(dir, "impostor");
  const leaf = await issueCert(ca, {
    cn: "127.0.0.1",
    sans: ["127.0.0.1", "localhost"],
    usage: "server",
    name: "impostor",
  });
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--allow-net",
      "--allow-read",
      new URL("./impostor.ts", import.meta.url).pathname,
      leaf.certFile,
      leaf.keyFile,
    ],
    stdout: "piped",
    stderr: "null",
  }).spawn();
  const lines: string[] = [];
  let ended = false;
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  const pumped = (async () => {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        ended = true;
        return;
      }
      buf += value;
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        lines.push(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
    }
  })();
  const port = await waitFor('the impostor\'s "listening" line', () => {
    const hit = lines.find((l) => l.startsWith("listening "));
    if (hit) return Number(hit.split(" ")[1]);
    if (ended) throw new Error("the impostor exited before it listened");
  }).catch(async (e) => {
    try {
      child.kill("SIGKILL");
    } catch { /* exited already */ }
    await child.status;
    await pumped.catch(() => {});
    throw e;
  });
  return {
    port,
    caFile: ca.certFile,
    requests: () => lines.filter((l) => l.startsWith("request ")),
    async close() {
      child.kill("SIGTERM");
      await child.status;
      await pumped.catch(() => {});
    },
  };
}

const MODES = {
  "CA file": (s: Simulator) => [`--proxmox-ca-file=${s.caFile}`],
  "CA file and fingerprint": (
    s: Simulator,
  ) => [`--proxmox-ca-file=${s.caFile}`, `--proxmox-tls-fingerprint=${s.fingerprint}`],
  "fingerprint": (s: Simulator) => [`--proxmox-tls-fingerprint=${s.fingerprint}`],
};

for (const [mode, trust] of Object.entries(MODES)) {
  Deno.test({
    ...T,
    name: `a server trusted only through DENO_CERT never sees a request (${mode})`,
    async fn() {
      const sim = await startSimulator();
      const dir = await Deno.makeTempDir({ prefix: "bf-trust-" });
      const impostor = await spawnImpostor(dir);
      // The startup TLS probe reaches the real API; every later connection the impostor.
      const relay = await tcpRelay((n) => n === 0 ? sim.port : impostor.port);
      try {
        const tokenFile = `${dir}/token`;
        await Deno.writeTextFile(tokenFile, sim.tokenSecret);
        const apiUrl = `https://127.0.0.1:${relay.port}/api2/json`;
        const sp = spawnProvider(
          ["--addr=127.0.0.1:0", ...providerArgs(sim, tokenFile, { apiUrl, trust: trust(sim) })],
          // The impostor's CA is a runtime root here, as with DENO_CERT on a real host.
          { env: { DENO_CERT: impostor.caFile } },
        );
        let timer: ReturnType<typeof setTimeout> | undefined;
        const status = await Promise.race([
          sp.child.status,
          new Promise<null>((r) => timer = setTimeout(() => r(null), 30_000)),
        ]);
        clearTimeout(timer);
        if (status === null) sp.child.kill("SIGKILL");
        await sp.child.status;
        await sp.pumped;
        assert.deepEqual(impostor.requests(), [], "no request reached the impostor");
        // Without an inventory it could not describe the cluster: startup stops on the TLS error.
        assert.notEqual(status?.code ?? 0, 0, sp.stderr());
        assert.match(sp.stderr(), /TLS (verification|fingerprint mismatch)/);
      } finally {
        await relay.close();
        await impostor.close();
        await sim.close();
        await Deno.remove(dir, { recursive: true });
      }
    },
  });
}

for (const [mode, trust] of Object.entries(MODES)) {
  Deno.test({
    ...T,
    name: `HTTPS_PROXY and friends never receive the provider's API traffic (${mode})`,
    async fn() {
      const sim = await startSimulator();
      const catcher = await proxyCatcher();
      const dir = await Deno.makeTempDir({ prefix: "bf-trust-" });
      const tokenFile = `${dir}/token`;
      await Deno.writeTextFile(tokenFile, sim.tokenSecret);
      const p = await startProvider({
        args: providerArgs(sim, tokenFile, { trust: trust(sim) }),
        env: {
          // `deno run` itself checks dl.deno.land for updates through the proxy.
          DENO_NO_UPDATE_CHECK: "1",
          HTTPS_PROXY: catcher.url,
          https_proxy: catcher.url,
          HTTP_PROXY: catcher.url,
          http_proxy: catcher.url,
          ALL_PROXY: catcher.url,
          all_proxy: catcher.url,
          NO_PROXY: "",
          no_proxy: "",
        },
      });
      try {
        assert.ok(authed(sim).length > 0, "the provider talked to the API directly");
        assert.deepEqual(catcher.seen, [], "the proxy received nothing");
      } finally {
        await p.stop();
        await catcher.close();
        await sim.close();
        await Deno.remove(dir, { recursive: true });
      }
    },
  });
}
