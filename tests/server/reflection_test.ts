// gRPC server reflection on --addr, as grpcurl uses it: the v1 and v1alpha
// services list CapacityProvider and Health and serve the contract's file
// descriptor; --reflection=false removes it. What answers is loaded on the
// first call (src/server/reflection.ts), so a call on a server that has just
// started is answered too. The client speaks the reflection protocol through
// a minimal wire-compatible copy of its messages.

import assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { withGoawayFilter } from "../../src/client/goaway_credentials.ts";
import { serveGuarded } from "../harness/guarded_server.ts";
import * as protoLoader from "@grpc/proto-loader";
import { PROTO_PATH } from "../../src/proto.ts";
import { addReflection } from "../../src/server/reflection.ts";
import descriptor from "protobufjs/ext/descriptor/index.js";
import { fakeProviderArgs, startProvider } from "../harness/mod.ts";

const REFLECTION_PROTO = `
syntax = "proto3";
package grpc.reflection.v1;
service ServerReflection {
  rpc ServerReflectionInfo(stream ServerReflectionRequest) returns (stream ServerReflectionResponse);
}
message ServerReflectionRequest {
  string host = 1;
  oneof message_request {
    string file_by_filename = 3;
    string file_containing_symbol = 4;
    string list_services = 7;
  }
}
message ServerReflectionResponse {
  string valid_host = 1;
  oneof message_response {
    FileDescriptorResponse file_descriptor_response = 4;
    ListServiceResponse list_services_response = 6;
    ErrorResponse error_response = 7;
  }
}
message FileDescriptorResponse { repeated bytes file_descriptor_proto = 1; }
message ListServiceResponse { repeated ServiceResponse service = 1; }
message ServiceResponse { string name = 1; }
message ErrorResponse { int32 error_code = 1; string error_message = 2; }
`;

interface ReflectionResponse {
  list_services_response?: { service: { name: string }[] };
  file_descriptor_response?: { file_descriptor_proto: Uint8Array[] };
  error_response?: { error_code: number; error_message: string };
}

async function reflectionClient(addr: string, version = "v1") {
  const dir = await Deno.makeTempDir();
  await Deno.writeTextFile(
    `${dir}/reflection.proto`,
    REFLECTION_PROTO.replace("grpc.reflection.v1;", `grpc.reflection.${version};`),
  );
  const def = protoLoader.loadSync(`${dir}/reflection.proto`, { keepCase: true, oneofs: true });
  await Deno.remove(dir, { recursive: true });
  // deno-lint-ignore no-explicit-any
  const pkg = grpc.loadPackageDefinition(def) as any;
  const Ctor = pkg.grpc.reflection[version].ServerReflection as typeof grpc.Client;
  return new Ctor(addr, withGoawayFilter(grpc.credentials.createInsecure()));
}

/** One request on a fresh stream; resolves with the first response or the stream's error. */
function ask(client: grpc.Client, req: Record<string, string>): Promise<ReflectionResponse> {
  return new Promise((resolve, reject) => {
    // deno-lint-ignore no-explicit-any
    const call = (client as any).ServerReflectionInfo() as grpc.ClientDuplexStream<
      unknown,
      ReflectionResponse
    >;
    call.on("data", (res: ReflectionResponse) => {
      resolve(res);
      call.end();
    });
    call.on("error", reject);
    call.write(req);
  });
}

Deno.test({
  name: "reflection: lists the services and serves the contract's descriptor",
  async fn() {
    const p = await startProvider({ args: fakeProviderArgs({ seed: 4 }) });
    const client = await reflectionClient(p.addr);
    try {
      const listed = await ask(client, { list_services: "*" });
      const names = listed.list_services_response!.service.map((s) => s.name);
      assert.ok(names.includes("bigfleet.v1alpha1.CapacityProvider"), names.join(","));
      assert.ok(names.includes("grpc.health.v1.Health"), names.join(","));

      const file = await ask(client, {
        file_containing_symbol: "bigfleet.v1alpha1.CapacityProvider",
      });
      const descriptors = file.file_descriptor_response!.file_descriptor_proto;
      const text = descriptors.map((d) => new TextDecoder("latin1").decode(d)).join("\n");
      for (
        const name of ["CapacityProvider", "TransitionAck", "shard_metadata", "since_revision"]
      ) {
        assert.ok(text.includes(name), `descriptor lacks ${name}`);
      }

      const missing = await ask(client, { file_containing_symbol: "no.such.Service" });
      assert.equal(missing.error_response?.error_code, grpc.status.NOT_FOUND);
    } finally {
      client.close();
      await p.stop();
    }
  },
});

Deno.test({
  name: "reflection: --reflection=false leaves it unregistered",
  async fn() {
    const p = await startProvider({
      args: fakeProviderArgs({ seed: 4, extra: ["--reflection=false"] }),
    });
    const client = await reflectionClient(p.addr);
    try {
      await assert.rejects(
        ask(client, { list_services: "*" }),
        (e: { code: number }) => e.code === grpc.status.UNIMPLEMENTED,
      );
    } finally {
      client.close();
      await p.stop();
    }
  },
});

async function serve(contractProto: string): Promise<{ stop(): Promise<void>; addr: string }> {
  const server = new grpc.Server();
  addReflection(server, contractProto);
  const served = await serveGuarded(server);
  return { stop: served.stop, addr: `127.0.0.1:${served.port}` };
}

const serviceNames = (r: ReflectionResponse) =>
  r.list_services_response!.service.map((s) => s.name).sort();

Deno.test({
  name: "reflection: the first calls, v1 and v1alpha at once, wait for the load and are answered",
  async fn() {
    const { stop, addr } = await serve(PROTO_PATH);
    const v1 = await reflectionClient(addr, "v1");
    const v1alpha = await reflectionClient(addr, "v1alpha");
    try {
      const answers = await Promise.all([
        ask(v1, { list_services: "*" }),
        ask(v1alpha, { list_services: "*" }),
        ask(v1, { file_containing_symbol: "grpc.health.v1.Health" }),
      ]);
      const expected = ["bigfleet.v1alpha1.CapacityProvider", "grpc.health.v1.Health"];
      assert.deepEqual(serviceNames(answers[0]), expected);
      assert.deepEqual(serviceNames(answers[1]), expected);
      const health = answers[2].file_descriptor_response!.file_descriptor_proto
        .map((d) => new TextDecoder("latin1").decode(d)).join("\n");
      for (const name of ["HealthCheckRequest", "Watch", "List", "SERVICE_UNKNOWN"]) {
        assert.ok(health.includes(name), `health descriptor lacks ${name}`);
      }
    } finally {
      v1.close();
      v1alpha.close();
      await stop();
    }
  },
});

Deno.test({
  name: "reflection: nothing is parsed until a call; a load that fails is answered UNAVAILABLE",
  async fn() {
    // Registering with a contract that does not exist succeeds: nothing is read yet.
    const { stop, addr } = await serve("/nonexistent/provider.proto");
    const client = await reflectionClient(addr);
    try {
      for (let i = 0; i < 2; i++) {
        await assert.rejects(
          ask(client, { list_services: "*" }),
          (e: { code: number }) => e.code === grpc.status.UNAVAILABLE,
        );
      }
    } finally {
      client.close();
      await stop();
    }
  },
});

interface DecodedMessage {
  name: string;
  reservedRange: { start: number; end: number }[];
  field: { name: string; typeName?: string; label?: number }[];
  nestedType: DecodedMessage[];
  options?: { mapEntry?: boolean } | null;
}

/** grpcurl on PATH or in Go's bin folder; null when there is none. */
function grpcurlPath(): string | null {
  const dirs = [...(Deno.env.get("PATH") ?? "").split(":"), `${Deno.env.get("HOME")}/go/bin`];
  for (const d of dirs) {
    try {
      if (Deno.statSync(`${d}/grpcurl`).isFile) return `${d}/grpcurl`;
    } catch { /* not there */ }
  }
  return null;
}

Deno.test({
  name:
    "reflection: descriptors as protoc writes them (map entries, reserved ranges), so grpcurl accepts them",
  async fn() {
    const p = await startProvider({ args: fakeProviderArgs({ seed: 4 }) });
    const client = await reflectionClient(p.addr);
    try {
      const file = await ask(client, { file_containing_symbol: "bigfleet.v1alpha1.Machine" });
      const entries: string[] = [];
      for (const bin of file.file_descriptor_response!.file_descriptor_proto) {
        const fd = descriptor.FileDescriptorProto.decode(bin) as unknown as {
          package: string;
          messageType: DecodedMessage[];
        };
        for (const m of fd.messageType) {
          // descriptor.proto's reserved ranges end exclusive: `reserved 11;` is 11 to 12.
          if (m.name === "Machine") {
            assert.deepEqual(m.reservedRange.map((r) => [r.start, r.end]), [[11, 12]]);
          }
          for (const n of m.nestedType.filter((n) => n.options?.mapEntry)) {
            // protoc: CamelCase(field name) + "Entry", and the field points at it absolutely.
            const field = m.field.find((f) => f.typeName?.split(".").at(-1) === n.name);
            assert.ok(field, `${m.name}.${n.name}: no field uses this map entry`);
            const want = field.name.split("_").map((w) => w[0].toUpperCase() + w.slice(1))
              .join("") + "Entry";
            assert.equal(n.name, want, `${m.name}.${field.name}`);
            assert.equal(field.typeName, `.${fd.package}.${m.name}.${want}`);
            entries.push(`${m.name}.${n.name}`);
          }
        }
      }
      assert.deepEqual(entries.sort(), [
        "ConfigureRequest.ShardMetadataEntry",
        "Machine.LabelsEntry",
        "Machine.ShardMetadataEntry",
        "Resources.ResourcesEntry",
      ]);

      // grpcurl builds Go descriptors from these and refuses a wrong map entry name.
      const grpcurl = grpcurlPath();
      if (grpcurl === null) {
        console.log("skip: grpcurl is not installed; the descriptor was checked above");
        return;
      }
      const out = await new Deno.Command(grpcurl, {
        args: ["-plaintext", p.addr, "describe", "bigfleet.v1alpha1.Machine"],
        stdout: "piped",
        stderr: "piped",
      }).output();
      const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
      assert.equal(out.code, 0, text);
      assert.match(text, /map<string, string> shard_metadata = 15;/);
      // And a call made with nothing but what reflection served.
      const list = await new Deno.Command(grpcurl, {
        args: [
          "-plaintext",
          "-d",
          '{"max_results":1}',
          p.addr,
          "bigfleet.v1alpha1.CapacityProvider/List",
        ],
        stdout: "piped",
        stderr: "piped",
      }).output();
      assert.equal(list.code, 0, new TextDecoder().decode(list.stderr));
      const machines = JSON.parse(new TextDecoder().decode(list.stdout)).machines;
      assert.equal(machines.length, 1);
      assert.deepEqual(machines[0].resources, { resources: { cpu: "1", memory: "2Gi" } });
    } finally {
      client.close();
      await p.stop();
    }
  },
});
