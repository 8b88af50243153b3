// grpc.health.v1 as src/server/health.ts serves it, checked against an
// independent implementation of the wire format: protobufjs over the
// grpc-health-check package's health.proto, and that package's generated
// client. Check answers the status or NOT_FOUND, Watch sends the current
// status at once and then each change (SERVICE_UNKNOWN for a service it does
// not know, without ending the stream), List sends every service.

import assert from "node:assert/strict";
import * as grpc from "@grpc/grpc-js";
import { withGoawayFilter } from "../../src/client/goaway_credentials.ts";
import { serveGuarded } from "../harness/guarded_server.ts";
import { protoPath, service as libraryHealth } from "grpc-health-check";
import protobuf from "protobufjs";
import { DecodeError } from "../../src/server/codec.ts";
import {
  decodeCheckRequest,
  decodeCheckResponse,
  decodeListResponse,
  encodeCheckRequest,
  encodeCheckResponse,
  encodeListResponse,
  Health,
  type ServingStatus,
} from "../../src/server/health.ts";
import { SERVICE } from "../../src/server/grpc.ts";
import { fakeProviderArgs, startProvider, waitForServing } from "../harness/mod.ts";

const root = protobuf.loadSync(protoPath);
const CheckRequest = root.lookupType("grpc.health.v1.HealthCheckRequest");
const CheckResponse = root.lookupType("grpc.health.v1.HealthCheckResponse");
const ListResponse = root.lookupType("grpc.health.v1.HealthListResponse");
const STATUSES: ServingStatus[] = ["UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"];

Deno.test("health codec: the messages decode as health.proto defines them, and back", () => {
  for (const name of ["", "bigfleet.v1alpha1.CapacityProvider", "é"]) {
    const bytes = encodeCheckRequest({ service: name });
    assert.deepEqual(
      CheckRequest.toObject(CheckRequest.decode(bytes)),
      name ? { service: name } : {},
    );
    assert.deepEqual(decodeCheckRequest(CheckRequest.encode({ service: name }).finish()), {
      service: name,
    });
  }
  for (const status of STATUSES) {
    const decoded = CheckResponse.toObject(CheckResponse.decode(encodeCheckResponse(status)), {
      enums: String,
      defaults: true,
    });
    assert.deepEqual(decoded, { status });
    const theirs = CheckResponse.encode(CheckResponse.fromObject({ status })).finish();
    assert.equal(decodeCheckResponse(theirs), status);
  }
  const statuses: [string, ServingStatus][] = [["", "SERVING"], [SERVICE, "NOT_SERVING"]];
  const list = ListResponse.toObject(ListResponse.decode(encodeListResponse(statuses)), {
    enums: String,
  });
  assert.deepEqual(list, {
    statuses: { "": { status: "SERVING" }, [SERVICE]: { status: "NOT_SERVING" } },
  });
  const theirs = ListResponse.encode(ListResponse.fromObject(list)).finish();
  assert.deepEqual(decodeListResponse(theirs), statuses);
  // Fields it does not know are skipped; a cut-short message is refused.
  assert.deepEqual(decodeCheckRequest(Uint8Array.of(0x10, 0x05, 0x0a, 0x01, 0x78)), {
    service: "x",
  });
  assert.throws(() => decodeCheckRequest(Uint8Array.of(0x0a, 0x05, 0x78)), DecodeError);
});

type HealthClient = grpc.Client & {
  Check(
    req: { service: string },
    cb: (e: grpc.ServiceError | null, res?: { status: string }) => void,
  ): void;
  Watch(req: { service: string }): grpc.ClientReadableStream<{ status: string }>;
  List(
    req: Record<string, never>,
    cb: (
      e: grpc.ServiceError | null,
      res?: { statuses: Record<string, { status: string }> },
    ) => void,
  ): void;
};

function libraryClient(addr: string): HealthClient {
  const Ctor = grpc.makeGenericClientConstructor(libraryHealth, "Health");
  return new Ctor(
    addr,
    withGoawayFilter(grpc.credentials.createInsecure()),
  ) as unknown as HealthClient;
}

function check(c: HealthClient, service: string): Promise<string> {
  return new Promise((resolve, reject) =>
    c.Check({ service }, (e, res) => e ? reject(e) : resolve(res!.status))
  );
}

function list(c: HealthClient): Promise<Record<string, string>> {
  return new Promise((resolve, reject) =>
    c.List({}, (e, res) =>
      e ? reject(e) : resolve(
        Object.fromEntries(Object.entries(res!.statuses).map(([k, v]) => [k, v.status])),
      ))
  );
}

/** A Watch whose messages are collected; `next()` waits for the following one. */
function watch(c: HealthClient, service: string) {
  const stream = c.Watch({ service });
  const seen: string[] = [];
  const waiters: (() => void)[] = [];
  let ended: grpc.ServiceError | null = null;
  stream.on("data", (m: { status: string }) => {
    seen.push(m.status);
    waiters.shift()?.();
  });
  stream.on("error", (e: grpc.ServiceError) => {
    ended = e;
    for (const w of waiters.splice(0)) w();
  });
  let read = 0;
  return {
    seen,
    ended: () => ended,
    /** The next message; fails if none comes within 5 s or the stream ends. */
    async next(): Promise<string> {
      if (read >= seen.length) {
        let timer: ReturnType<typeof setTimeout> | undefined;
        await Promise.race([
          new Promise<void>((r) => waiters.push(r)),
          new Promise<void>((r) => timer = setTimeout(r, 5_000)),
        ]);
        clearTimeout(timer);
      }
      if (read >= seen.length) throw new Error(`no message (seen ${seen}; ended: ${ended})`);
      return seen[read++];
    },
    cancel: () => stream.cancel(),
  };
}

async function withServer(
  fn: (health: Health, client: HealthClient) => Promise<void>,
  initial: Record<string, ServingStatus> = { "": "NOT_SERVING", [SERVICE]: "NOT_SERVING" },
): Promise<void> {
  const server = new grpc.Server();
  const health = new Health(initial);
  health.addToServer(server);
  const served = await serveGuarded(server);
  const client = libraryClient(`127.0.0.1:${served.port}`);
  try {
    await fn(health, client);
  } finally {
    client.close();
    await served.stop();
  }
}

Deno.test("health: Check answers each service's status, NOT_FOUND for others", async () => {
  await withServer(async (health, client) => {
    assert.equal(await check(client, ""), "NOT_SERVING");
    health.setStatus("", "SERVING");
    health.setStatus(SERVICE, "SERVING");
    assert.equal(await check(client, ""), "SERVING");
    assert.equal(await check(client, SERVICE), "SERVING");
    await assert.rejects(check(client, "no.such.Service"), (e: grpc.ServiceError) => {
      assert.equal(e.code, grpc.status.NOT_FOUND);
      assert.match(e.details, /no\.such\.Service/);
      return true;
    });
    assert.deepEqual(await list(client), { "": "SERVING", [SERVICE]: "SERVING" });
  });
});

Deno.test("health: Watch sends the status at once and each change, SERVICE_UNKNOWN first for an unknown service", async () => {
  await withServer(async (health, client) => {
    const known = watch(client, SERVICE);
    const unknown = watch(client, "later.Service");
    assert.equal(await known.next(), "NOT_SERVING");
    assert.equal(await unknown.next(), "SERVICE_UNKNOWN");

    health.setStatus(SERVICE, "SERVING");
    assert.equal(await known.next(), "SERVING");
    // The same status again is no change; the next message is the next change.
    health.setStatus(SERVICE, "SERVING");
    health.setStatus(SERVICE, "NOT_SERVING");
    assert.equal(await known.next(), "NOT_SERVING");

    // Still open: the service becoming known is sent on the same stream.
    health.setStatus("later.Service", "SERVING");
    assert.equal(await unknown.next(), "SERVING");
    assert.deepEqual([known.seen, unknown.seen], [
      ["NOT_SERVING", "SERVING", "NOT_SERVING"],
      ["SERVICE_UNKNOWN", "SERVING"],
    ]);
    assert.equal(known.ended(), null);
    known.cancel();
    unknown.cancel();
  });
});

Deno.test("health: List refuses more than 100 services", async () => {
  const many: Record<string, ServingStatus> = {};
  for (let i = 0; i < 101; i++) many[`s${i}`] = "SERVING";
  await withServer(async (_health, client) => {
    await assert.rejects(list(client), (e: grpc.ServiceError) => {
      assert.equal(e.code, grpc.status.RESOURCE_EXHAUSTED);
      return true;
    });
  }, many);
  delete many.s100;
  await withServer(async (_health, client) => {
    assert.equal(Object.keys(await list(client)).length, 100);
  }, many);
});

Deno.test("health: the provider serves it on --addr, SERVING once it serves", async () => {
  const p = await startProvider({ args: fakeProviderArgs({ seed: 4 }) });
  const client = libraryClient(p.addr);
  try {
    // Marked serving before the line is logged (src/app.ts): from the line on, SERVING.
    await waitForServing(p);
    assert.equal(await check(client, ""), "SERVING");
    assert.equal(await check(client, SERVICE), "SERVING");
    assert.deepEqual(await list(client), { "": "SERVING", [SERVICE]: "SERVING" });
    await assert.rejects(
      check(client, "grpc.health.v1.Health"),
      (e: grpc.ServiceError) => e.code === grpc.status.NOT_FOUND,
    );
  } finally {
    client.close();
    await p.stop();
  }
});
