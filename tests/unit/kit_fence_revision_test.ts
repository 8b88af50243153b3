import assert from "node:assert/strict";
import { fenceKey, isNewer, isUnfenced } from "../../src/kit/fence.ts";
import { encodeRevision, parseRevision } from "../../src/kit/revision.ts";

const MAX = 2n ** 63n - 1n;
const MIN = -(2n ** 63n);

Deno.test("fence: only the empty shard with (0,0) is unfenced", () => {
  assert.equal(isUnfenced({ shardId: "", epoch: 0n, seq: 0n }), true);
  assert.equal(isUnfenced({ shardId: "s", epoch: 0n, seq: 0n }), false);
  assert.equal(isUnfenced({ shardId: "", epoch: 0n, seq: 1n }), false);
  assert.equal(isUnfenced({ shardId: "", epoch: -1n, seq: 0n }), false);
});

Deno.test("fence: lexicographic signed comparison, epoch first", () => {
  const cases: [bigint, bigint, bigint, bigint, boolean][] = [
    [2n, 5n, 2n, 5n, false],
    [2n, 6n, 2n, 5n, true],
    [2n, 4n, 2n, 5n, false],
    [3n, 0n, 2n, 999999n, true],
    [1n, 99999n, 2n, 5n, false],
    [1n, -1n, 1n, -2n, true],
    [-1n, 1n, 0n, 0n, false],
    [0n, 1n, -7n, -3n, true],
    [MAX, MAX, MAX - 1n, MAX, true],
    [MAX - 1n, MAX, MAX, MAX, false],
    [MAX, MAX, MAX, MAX, false],
    [MIN, MAX, MIN, MIN, true],
  ];
  for (const [e, s, me, ms, want] of cases) {
    assert.equal(
      isNewer({ epoch: e, seq: s }, { epoch: me, seq: ms }),
      want,
      `(${e},${s}) vs (${me},${ms})`,
    );
  }
});

Deno.test("fence: keys never collide across (shard, machine) splits", () => {
  assert.notEqual(fenceKey("a/b", "c"), fenceKey("a", "b/c"));
  assert.notEqual(fenceKey("a\u0000b", "c"), fenceKey("a", "b\u0000c"));
});

Deno.test("revision: strict int64 decimal, anything else is no cursor", () => {
  const enc = (s: string) => new TextEncoder().encode(s);
  assert.equal(parseRevision(enc("123")), 123n);
  assert.equal(parseRevision(enc("+7")), 7n);
  assert.equal(parseRevision(enc("-5")), -5n);
  assert.equal(parseRevision(enc("9223372036854775807")), MAX);
  for (
    const bad of [
      "",
      " 12",
      "12 ",
      "123!",
      "~123",
      "0x1f",
      "1e3",
      "1_000",
      "9223372036854775808",
      "+",
      "-",
    ]
  ) {
    assert.equal(parseRevision(enc(bad)), null, JSON.stringify(bad));
  }
  assert.equal(parseRevision(new Uint8Array([0x00, 0xff, 0x10, 0x42, 0x7f])), null);
  assert.equal(parseRevision(new Uint8Array(4096).fill(0xde)), null);
  assert.equal(parseRevision(new Uint8Array([0x31, 0x32, 0x00, 0xff])), null);
  assert.equal(parseRevision(undefined), null);
  assert.equal(new TextDecoder().decode(encodeRevision(42)), "42");
});
