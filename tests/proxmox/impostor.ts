// A stand-alone HTTPS server for trust tests: serves the given certificate,
// answers every request like an empty Proxmox API, and prints one line per
// request so the test (its parent process) can prove none arrived. It runs in
// its own process so it shares no TLS session state with the real simulator.
//
//   deno run --allow-net --allow-read tests/proxmox/impostor.ts CERT_FILE KEY_FILE

import https from "node:https";

const [certFile, keyFile] = Deno.args;
const server = https.createServer(
  { cert: Deno.readTextFileSync(certFile), key: Deno.readTextFileSync(keyFile) },
  (req, res) => {
    const auth = req.headers.authorization ? "with-token" : "without-token";
    console.log(`request ${req.method} ${req.url} ${auth}`);
    res.writeHead(200, { "Content-Type": "application/json;charset=UTF-8" });
    res.end('{"data":[]}');
  },
);
server.listen(0, "127.0.0.1", () => {
  const addr = server.address();
  console.log(`listening ${typeof addr === "object" && addr ? addr.port : 0}`);
});
Deno.addSignalListener("SIGTERM", () => {
  server.close();
  Deno.exit(0);
});
