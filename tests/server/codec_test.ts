// The List encoder fills one buffer it sized in advance; these check its bytes
// against a plain protobuf writer for lengths on every varint boundary.

import assert from "node:assert/strict";
import protobuf from "protobufjs";
import { decodeCreate, decodeDrain, machineEncoder } from "../../src/server/codec.ts";
import { slotMachine } from "../../src/kit/slot_changes.ts";
import { State } from "../../src/kit/model.ts";
import type { MachineRecord } from "../../src/kit/model.ts";

function record(id: string, labelBytes: number): MachineRecord {
  return {
    ...slotMachine({
      id,
      instanceType: "pve.large",
      zone: "pve-a",
      pricePerHour: 0.0368,
      resources: [["cpu", "1"], ["memory", "2Gi"]],
      allocatable: [["cpu", "8"]],
      labels: labelBytes > 0 ? [["big", "x".repeat(labelBytes)]] : [],
    }),
    state: State.Configured,
    hostRef: "pve-a/101",
    cluster: "c1",
  };
}

function reference(machines: MachineRecord[], revision: Uint8Array): Uint8Array {
  const enc = machineEncoder("test");
  const w = protobuf.Writer.create();
  for (const m of machines) w.uint32(10).bytes(enc.machine(m));
  if (revision.length > 0) w.uint32(18).bytes(revision);
  return w.finish();
}

/** Byte equality with the first differing offset in the message (deepEqual is slow on MBs). */
function assertSameBytes(actual: Uint8Array, expected: Uint8Array, what: string): void {
  assert.equal(actual.length, expected.length, `${what}: length`);
  const at = actual.findIndex((b, i) => b !== expected[i]);
  assert.equal(at, -1, `${what}: first difference at byte ${at}`);
}

Deno.test("codec: List bytes equal a plain protobuf writer's across varint boundaries", () => {
  // Machine encodings just under and over 127, 16,383 and 2,097,151 bytes.
  const sizes = [0, 10, 40, 16_250, 16_300, 2_097_100, 2_097_200];
  const machines = sizes.map((n, i) => record(`m${i}`, n));
  const enc = machineEncoder("test");
  const lengths = new Set(machines.map((m) => enc.machine(m).length));
  assert.ok([...lengths].some((l) => l < 128) && [...lengths].some((l) => l > 2_097_151));
  for (const revision of [new Uint8Array(), new TextEncoder().encode("1733000000123")]) {
    assertSameBytes(enc.list(machines, revision), reference(machines, revision), "machines");
    assertSameBytes(enc.list([], revision), reference([], revision), "empty");
  }
});

Deno.test("codec: int64 fields decode exactly across the whole range", () => {
  const values = [
    "0",
    "1",
    "-1",
    "4294967295",
    "4294967296",
    "9007199254740993",
    "-9007199254740993",
    "9223372036854775807",
    "-9223372036854775808",
  ];
  for (const v of values) {
    const w = protobuf.Writer.create();
    w.uint32(10).string("m").uint32(26).string("shard");
    w.uint32(4 << 3).int64(v).uint32(5 << 3).int64(v);
    const create = decodeCreate(w.finish());
    assert.equal(create.token.epoch, BigInt(v), v);
    assert.equal(create.token.seq, BigInt(v), v);
    const d = protobuf.Writer.create();
    d.uint32(10).string("m").uint32(2 << 3).int64(v);
    assert.equal(decodeDrain(d.finish()).graceSeconds, BigInt(v), `grace ${v}`);
  }
});
