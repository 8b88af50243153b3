// Pure-function tests: naming/markers, UPIDs, agent encoding, error text, HTTP framing.

import assert from "node:assert/strict";
import {
  buildDescription,
  parseHostRef,
  parseMarker,
  parseTags,
  resolveTags,
  sanitizeId,
  vmName,
} from "../../src/proxmox/naming.ts";
import { isTaskSuccess, parseUpid } from "../../src/proxmox/api/tasks.ts";
import {
  agentEnabled,
  chunkSizeFor,
  decodeGuestOutput,
  tail,
  toBase64,
} from "../../src/proxmox/vm/agent.ts";
import { errorFromResponse } from "../../src/proxmox/api/client.ts";
import { ResponseParser } from "../../src/proxmox/api/http1.ts";
import { isTransient, missingVerdict } from "../../src/proxmox/api/errors.ts";

const enc = (s: string) => new TextEncoder().encode(s);

Deno.test("vm names are DNS labels of at most 63 characters", () => {
  const dns = /^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/;
  for (
    const id of [
      "proxmox/OnDemand/pve.small/pve1/003",
      "A__B..C",
      "x".repeat(200),
      "ünïcødé/machine",
      "---",
      "",
      "proxmox-dc1/OnDemand/pve.xlarge/some-very-long-node-name-here/123",
    ]
  ) {
    const n = vmName(id);
    assert.ok(n.length <= 63, n);
    assert.match(n, dns);
    assert.ok(n.startsWith("bigfleet-"));
  }
  assert.equal(
    vmName("proxmox/OnDemand/pve.small/pve1/003"),
    "bigfleet-proxmox-ondemand-pve-small-pve1-003",
  );
  // Long ids sharing a prefix still differ.
  assert.notEqual(vmName("p".repeat(80) + "/001"), vmName("p".repeat(80) + "/002"));
  assert.equal(sanitizeId("A.B/c"), "a-b-c");
});

Deno.test("tags follow the PVE tag grammar", () => {
  const re = /^[a-z0-9_][a-z0-9_\-+.]*$/;
  const tags = resolveTags(["bigfleet", "@machine"], "Weird Id!/ÄÖ/..");
  assert.equal(tags.length, 2);
  for (const t of tags) assert.match(t, re);
  assert.deepEqual(parseTags("bigfleet;BigFleet-x, other  y"), [
    "bigfleet",
    "bigfleet-x",
    "other",
    "y",
  ]);
  assert.deepEqual(parseTags(undefined), []);
});

Deno.test("marker round-trips verbatim machine ids, including odd characters", () => {
  for (
    const id of [
      "proxmox/OnDemand/pve.small/pve1/003",
      'with space and = and "quotes"',
      "line\nbreak",
      "ünïcødé ☃ 𝄞",
    ]
  ) {
    const d = buildDescription(id, "op-1");
    assert.ok(/^[\x20-\x7e\n]*$/.test(d), "description is plain ASCII");
    // PVE trims trailing whitespace of descriptions.
    assert.deepEqual(parseMarker(d.trimEnd() + "\n"), { machineId: id, operationId: "op-1" });
  }
  assert.equal(parseMarker("just a VM"), null);
  assert.equal(parseMarker(undefined), null);
  assert.deepEqual(
    parseMarker("BigFleet managed VM. machine_id=m/1 operation_id=tok"),
    { machineId: "m/1", operationId: "tok" },
  );
});

Deno.test("host refs", () => {
  assert.deepEqual(parseHostRef("pve1/105"), { node: "pve1", vmid: 105 });
  assert.equal(parseHostRef("pve1/5"), null);
  assert.equal(parseHostRef("pve1"), null);
  assert.equal(parseHostRef("a/b/105"), null);
});

Deno.test("UPIDs parse and task exit statuses classify", () => {
  const u = parseUpid("UPID:pve1:0002A1B3:01C4F0E2:66F1A2B3:qmclone:9000:root@pam!bigfleet:");
  assert.equal(u.node, "pve1");
  assert.equal(u.type, "qmclone");
  assert.equal(u.id, "9000");
  assert.throws(() => parseUpid("UPID:pve1:x"));
  assert.throws(() => parseUpid(null));
  assert.ok(isTaskSuccess("OK"));
  assert.ok(isTaskSuccess("WARNINGS: 3"));
  assert.ok(!isTaskSuccess("WARNINGS: x"));
  assert.ok(!isTaskSuccess("clone failed: boom"));
  assert.ok(!isTaskSuccess(""));
});

Deno.test("agent config values", () => {
  assert.ok(agentEnabled("1"));
  assert.ok(agentEnabled(1));
  assert.ok(agentEnabled("enabled=1,fstrim_cloned_disks=1"));
  assert.ok(agentEnabled("1,type=virtio"));
  assert.ok(!agentEnabled("0"));
  assert.ok(!agentEnabled("enabled=0"));
  assert.ok(!agentEnabled(undefined));
});

Deno.test("file-write chunks respect content and body limits", () => {
  const size = chunkSizeFor("/run/bigfleet-bootstrap.part999999");
  assert.equal(size % 3, 0);
  assert.ok(size <= 46080);
  assert.ok((size / 3) * 4 <= 61440);
  const body = JSON.stringify({
    file: "/run/bigfleet-bootstrap.part999999",
    content: "A".repeat((size / 3) * 4),
    encode: 0,
  });
  assert.ok(body.length < 65536);
  const long = chunkSizeFor("/x/" + "y".repeat(20000));
  assert.ok(
    JSON.stringify({
      file: "/x/" + "y".repeat(20000),
      content: "A".repeat((long / 3) * 4),
      encode: 0,
    }).length < 65536,
  );
  const bytes = Uint8Array.from({ length: 100_000 }, (_, i) => (i * 7919) & 0xff);
  assert.deepEqual(Uint8Array.from(atob(toBase64(bytes)), (c) => c.charCodeAt(0)), bytes);
});

Deno.test("guest output: Latin-1 mojibake is reversed, real text kept", () => {
  const mojibake = String.fromCharCode(...enc("grüße ☃"));
  assert.equal(decodeGuestOutput(mojibake), "grüße ☃");
  assert.equal(decodeGuestOutput("grüße ☃"), "grüße ☃");
  assert.equal(decodeGuestOutput("plain"), "plain");
  assert.equal(decodeGuestOutput("\xff\xfe"), "\xff\xfe");
  assert.equal(decodeGuestOutput(undefined), "");
  assert.equal(tail("a\n".repeat(2000) + "last line", 50).endsWith("last line"), true);
  assert.ok(tail("x".repeat(5000)).length <= 1025);
});

Deno.test("error text: message, reason phrase, legacy fallbacks", () => {
  const json = (v: unknown) => enc(JSON.stringify(v));
  let e = errorFromResponse("GET", "/x", {
    status: 500,
    reason: "Internal Server Error",
    body: json({
      data: null,
      message: "Configuration file 'nodes/p/qemu-server/1.conf' does not exist\n",
    }),
  });
  assert.match(e.message, /500 Configuration file .* does not exist$/);
  assert.equal(missingVerdict(e), "missing");
  e = errorFromResponse("GET", "/x", { status: 500, reason: "", body: json({ data: null }) });
  assert.equal(e.serverText, "");
  assert.equal(missingVerdict(e), "unknown");
  assert.match(e.message, /500 HTTP 500/);
  e = errorFromResponse("GET", "/x", {
    status: 500,
    reason: "VM 105 qga command 'guest-ping' failed - got timeout",
    body: json({ data: null }),
  });
  assert.equal(e.serverText, "VM 105 qga command 'guest-ping' failed - got timeout");
  e = errorFromResponse("POST", "/y", {
    status: 400,
    reason: "Parameter verification failed.",
    body: json({ data: null, errors: { vmid: "VM 218 already exists" } }),
  });
  assert.match(e.message, /vmid: VM 218 already exists/);
  e = errorFromResponse("POST", "/y", {
    status: 596,
    reason: "Connection timed out",
    body: enc(""),
  });
  assert.ok(isTransient(e));
  assert.match(e.message, /596 Connection timed out/);
  e = errorFromResponse("GET", "/y", {
    status: 401,
    reason: "Authentication failed!",
    body: enc(""),
  });
  assert.match(e.message, /401 authentication failed/);
});

/** Feed a response in pieces of `step` bytes; returns the parser. */
function parse(text: string, step: number): ResponseParser {
  const p = new ResponseParser();
  const bytes = enc(text);
  for (let i = 0; i < bytes.length && !p.done; i += step) p.feed(bytes.subarray(i, i + step));
  return p;
}

Deno.test("HTTP/1.1 response framing: length, chunked, EOF; keep-alive only when safe", () => {
  const dec = (p: ResponseParser) => new TextDecoder().decode(p.response().body);
  for (const step of [1, 2, 3, 7, 1000]) {
    let p = parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", step);
    assert.ok(p.done && p.keepAlive, `length, step ${step}`);
    assert.equal(dec(p), "hello");
    p = parse(
      "HTTP/1.1 500 VM is locked (clone)\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
        "3\r\nabc\r\n2;x=y\r\nde\r\n0\r\nX-T: 1\r\n\r\n",
      step,
    );
    assert.ok(p.done, `chunked, step ${step}`);
    assert.equal(p.keepAlive, false, "Connection: close");
    assert.equal(dec(p), "abcde");
    assert.deepEqual([p.response().status, p.response().reason], [500, "VM is locked (clone)"]);
    p = parse("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", step);
    assert.ok(p.done && p.keepAlive && p.response().status === 204, `1xx, step ${step}`);
  }
  // No length and not chunked: the body runs to EOF, and the connection cannot be reused.
  const eof = parse("HTTP/1.1 596 Connection timed out\r\n\r\nConnection timed", 4);
  assert.equal(eof.done, false);
  eof.end();
  assert.ok(eof.done && !eof.keepAlive);
  assert.equal(dec(eof), "Connection timed");
  // Truncated responses are errors, not short bodies.
  assert.throws(() => parse("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort", 100).end());
  assert.throws(() => new ResponseParser().end(), /before a complete HTTP response/);
  assert.throws(() => parse("SMTP ready\r\n\r\n", 100), /malformed/);
  // Bytes after a complete response: the connection is not reusable.
  const extra = parse("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nxy", 100);
  assert.ok(extra.done && !extra.keepAlive);
});
