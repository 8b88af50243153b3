// A CapacityProvider proxy that forwards to a real provider and corrupts the
// answers in one chosen way. The mutant suite points behaviours at it to prove
// each assertion can fail: a check that passes against a broken provider
// certifies nothing.

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { PROTO_PATH } from "../../src/proto.ts";
import { serveGuarded } from "../harness/guarded_server.ts";
import { LOADER_OPTIONS } from "../harness/proto.ts";
import {
  type ConfigureRequest,
  type CreateRequest,
  type DeleteRequest,
  type DrainRequest,
  type ListFilter,
  type Machine,
  type MachineList,
  type MachineRef,
  MIB,
  ProviderClient,
  RpcError,
  type TransitionAck,
} from "../harness/mod.ts";

export interface Mutation {
  ack?(a: TransitionAck): TransitionAck;
  machine?(m: Machine): Machine;
  /** Replace List entirely; `forward` reaches the real provider. */
  list?(f: ListFilter, forward: (f: ListFilter) => Promise<MachineList>): Promise<MachineList>;
  code?(c: number): number;
}

export interface Proxy {
  addr: string;
  stop(): void;
}

type Handler = grpc.handleUnaryCall<unknown, unknown>;

export async function startMutatingProxy(target: string, mut: Mutation): Promise<Proxy> {
  const def = protoLoader.loadSync(PROTO_PATH, LOADER_OPTIONS);
  const pkg = grpc.loadPackageDefinition(def) as unknown as {
    bigfleet: { v1alpha1: { CapacityProvider: grpc.ServiceClientConstructor } };
  };
  const upstream = new ProviderClient(target, { maxReceiveBytes: 256 * MIB });
  const machine = (m: Machine | null) => (m && mut.machine ? mut.machine(m) : m);
  const ack = (a: TransitionAck) => {
    const out = mut.ack ? mut.ack(a) : a;
    return { ...out, machine: machine(out.machine) };
  };
  const forwardList = (f: ListFilter) => upstream.list(f);

  function handle<Req, Res>(fn: (r: Req) => Promise<Res>, post: (v: Res) => unknown): Handler {
    return (call, cb) => {
      fn(call.request as Req).then((v) => cb(null, post(v)), (e) => {
        const code = e instanceof RpcError ? e.code : grpc.status.INTERNAL;
        cb({
          code: mut.code ? mut.code(code) : code,
          details: e instanceof RpcError ? e.details : String(e),
        });
      });
    };
  }

  const server = new grpc.Server({ "grpc.max_receive_message_length": 64 * MIB });
  server.addService(pkg.bigfleet.v1alpha1.CapacityProvider.service, {
    Create: handle((r: CreateRequest) => upstream.create(r), ack),
    Configure: handle((r: ConfigureRequest) => upstream.configure(r), ack),
    Drain: handle((r: DrainRequest) => upstream.drain(r), ack),
    Delete: handle((r: DeleteRequest) => upstream.delete(r), ack),
    Get: handle((r: MachineRef) => upstream.get(r), machine),
    List: handle(
      (f: ListFilter) => (mut.list ? mut.list(f, forwardList) : forwardList(f)),
      (l: MachineList) => ({ ...l, machines: l.machines.map(machine) }),
    ),
  });
  const served = await serveGuarded(server);
  return {
    addr: `127.0.0.1:${served.port}`,
    stop() {
      void served.stop();
      upstream.close();
    },
  };
}
