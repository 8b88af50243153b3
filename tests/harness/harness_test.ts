// Self-test of the harness client against a stub server in this process:
// int64 exactness, raw bytes, NUL-bearing maps and status codes must survive
// the client unchanged, or every conformance verdict built on it is suspect.

import assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { serveGuarded } from "./guarded_server.ts";
import * as protoLoader from "@grpc/proto-loader";
import { PROTO_PATH } from "../../src/proto.ts";
import { LOADER_OPTIONS } from "./proto.ts";
import { Code, outcome, ProviderClient, uniqueShardId } from "./mod.ts";

type Handler = (
  call: { request: Record<string, unknown> },
  cb: grpc.sendUnaryData<unknown>,
) => void;

async function withStub(fn: (c: ProviderClient) => Promise<void>) {
  const def = protoLoader.loadSync(PROTO_PATH, LOADER_OPTIONS);
  const pkg = grpc.loadPackageDefinition(def) as unknown as {
    bigfleet: { v1alpha1: { CapacityProvider: grpc.ServiceClientConstructor } };
  };
  const svc = pkg.bigfleet.v1alpha1.CapacityProvider;
  const server = new grpc.Server();
  const echoAck: Handler = ({ request: r }, cb) =>
    cb(null, {
      operation_id: `${r.shard_id}|${r.shard_epoch}|${r.sequence_number}|${
        r.grace_period_seconds ?? ""
      }`,
    });
  server.addService(svc.service, {
    Create: echoAck,
    Drain: echoAck,
    Delete: (_c: unknown, cb: grpc.sendUnaryData<unknown>) =>
      cb({ code: Code.FAILED_PRECONDITION, details: "fenced" }),
    Configure: (({ request: r }, cb) =>
      cb(null, {
        operation_id: String((r.bootstrap_blob as Uint8Array).length),
        machine: { id: "m", state: 4, shard_metadata: r.shard_metadata, cluster: r.cluster_id },
      })) as Handler,
    Get: (({ request: r }, cb) =>
      r.id === "" ? cb({ code: Code.INVALID_ARGUMENT, details: "empty" }) : cb(null, {
        id: r.id,
        state: 1,
        shard_metadata: { "k\x00nul": "", "v": "\x00\x01\u0085你好🚀" },
      })) as Handler,
    List: (({ request: r }, cb) =>
      cb(null, { machines: [], revision: r.since_revision })) as Handler,
  });
  const served = await serveGuarded(server);
  const c = new ProviderClient(`127.0.0.1:${served.port}`);
  try {
    await fn(c);
  } finally {
    c.close();
    await served.stop();
  }
}

Deno.test({
  name: "harness client: int64, bytes, maps and codes survive the wire exactly",
  async fn() {
    await withStub(async (c) => {
      const max = (1n << 63n) - 1n;
      const a = await c.create({
        machine_id: "x",
        shard_id: "s",
        shard_epoch: max,
        sequence_number: -7n,
      });
      assert.equal(a.operation_id, `s|${max}|-7|`);
      const d = await c.drain({ machine_id: "x", grace_period_seconds: -(1n << 40n) });
      assert.equal(d.operation_id, `|0|0|${-(1n << 40n)}`);
      assert.throws(() => c.create({ machine_id: "x", shard_epoch: 2 ** 60 }), /not exact/);

      const md = { "a\x00b": "", "__empty": "" };
      const cf = await c.configure({
        machine_id: "m",
        cluster_id: "c",
        bootstrap_blob: new Uint8Array(3 << 20),
        shard_metadata: md,
      });
      assert.equal(cf.operation_id, String(3 << 20));
      assert.deepEqual(cf.machine?.shard_metadata, md);
      assert.equal(cf.machine?.host, null, "absent host decodes as null");

      const g = await c.get({ id: "m" });
      assert.deepEqual(g.shard_metadata, { "k\x00nul": "", "v": "\x00\x01\u0085你好🚀" });
      assert.equal(g.resources, null);

      const raw = new Uint8Array([0x00, 0xff, 0x10, 0x42, 0x7f]);
      const l = await c.list({ since_revision: raw });
      assert.deepEqual(l.revision, raw);

      const e = await outcome(c.get({ id: "" }));
      assert.equal(e.code, Code.INVALID_ARGUMENT);
      const f = await outcome(c.delete({ machine_id: "x" }));
      assert.equal(f.code, Code.FAILED_PRECONDITION);
      assert.notEqual(uniqueShardId("p"), uniqueShardId("p"));
    });
  },
});
