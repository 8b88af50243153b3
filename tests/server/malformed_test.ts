// A request that is not a well-formed protobuf message is a bad request
// (INVALID_ARGUMENT naming the method), never an INTERNAL error or a panic,
// and the provider goes on serving.

import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { fakeProviderArgs, startProvider } from "../harness/mod.ts";
import { RawClient } from "../harness/raw_client.ts";

Deno.test("malformed requests are INVALID_ARGUMENT and counted as no panic", async () => {
  const p = await startProvider({ args: fakeProviderArgs({ seed: 4 }) });
  const c = new RawClient(p.addr);
  try {
    const bad: [string, number[]][] = [
      ["Create", [(1 << 3) | 2, 20, 0x6d]], // machine_id cut short
      ["Get", [(1 << 3) | 6, 0]], // a wire type protobuf does not have
      ["Configure", [(7 << 3) | 2, 50, 10, 1]], // shard_metadata entry cut short
      ["List", [(1 << 3) | 2, 9, 1]], // packed states cut short
    ];
    for (const [method, bytes] of bad) {
      const err = await c.call(method, Buffer.from(bytes)).then(
        () => assert.fail(`${method} accepted a malformed request`),
        (e) => e,
      );
      assert.equal(err.code, 3, `${method}: ${err.details}`);
      assert.match(err.details, new RegExp(`^malformed ${method} request: `));
    }
    // Still serving, and nothing was counted as a handler panic.
    assert.ok((await c.list()).length > 0);
    assert.doesNotMatch(p.stderr(), /panic|internal error/i);
  } finally {
    c.close();
    await p.stop();
  }
});
