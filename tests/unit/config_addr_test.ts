import assert from "node:assert/strict";
import { parseListenAddr } from "../../src/config/addr.ts";

Deno.test("addr: accepted listen address forms", () => {
  assert.deepEqual(parseListenAddr(":9000"), { host: "", port: 9000, raw: ":9000" });
  assert.deepEqual(parseListenAddr("127.0.0.1:9000"), {
    host: "127.0.0.1",
    port: 9000,
    raw: "127.0.0.1:9000",
  });
  assert.deepEqual(parseListenAddr("[::1]:9000"), { host: "::1", port: 9000, raw: "[::1]:9000" });
  assert.deepEqual(parseListenAddr("localhost:0"), {
    host: "localhost",
    port: 0,
    raw: "localhost:0",
  });
  assert.equal(parseListenAddr("0.0.0.0:65535").port, 65535);
  assert.equal(parseListenAddr("[::]:1").host, "::");
});

Deno.test("addr: bad listen addresses are rejected", () => {
  for (
    const bad of [
      "9000",
      "",
      "localhost",
      "localhost:",
      ":65536",
      ":-1",
      ":http",
      "::1:9000",
      "[::1:9000",
      "[host]:80",
      "a b:1",
      ":99999999",
    ]
  ) {
    assert.throws(() => parseListenAddr(bad), Error, bad);
  }
});
