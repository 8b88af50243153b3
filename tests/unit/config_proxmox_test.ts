import assert from "node:assert/strict";
import {
  checkApiUrl,
  checkTokenId,
  cleanSecret,
  normaliseFingerprint,
  parseNodes,
  parseVmidRange,
} from "../../src/config/proxmox.ts";

const HEX = "ab".repeat(32);
const COLON = Array(32).fill("AB").join(":");

Deno.test("proxmox: fingerprint forms normalise to upper-case colon form", () => {
  assert.equal(normaliseFingerprint(HEX), COLON);
  assert.equal(normaliseFingerprint(HEX.toUpperCase()), COLON);
  assert.equal(normaliseFingerprint(COLON.toLowerCase()), COLON);
  assert.equal(normaliseFingerprint(` ${COLON} `), COLON);
  const mixed = "0123456789abcdef".repeat(4);
  assert.equal(normaliseFingerprint(mixed), mixed.toUpperCase().match(/../g)!.join(":"));
});

Deno.test("proxmox: bad fingerprints are rejected", () => {
  for (
    const bad of [
      "",
      "ab".repeat(31),
      "ab".repeat(33),
      "zz".repeat(32),
      COLON.slice(3),
      "AB-".repeat(31) + "AB",
      HEX.slice(1) + ":",
    ]
  ) {
    assert.throws(() => normaliseFingerprint(bad), /SHA-256/, bad);
  }
});

Deno.test("proxmox: API URL must be https", () => {
  assert.equal(checkApiUrl("https://pve1:8006/api2/json"), "https://pve1:8006/api2/json");
  assert.equal(checkApiUrl("https://pve1:8006/api2/json/"), "https://pve1:8006/api2/json");
  assert.throws(() => checkApiUrl("http://pve1:8006/api2/json"), /https/);
  assert.throws(() => checkApiUrl("pve1:8006"), /https|not a URL/);
  assert.throws(() => checkApiUrl("not a url"), /not a URL/);
  assert.throws(() => checkApiUrl("https://u:p@pve1/"), /credentials/);
});

Deno.test("proxmox: token id shape", () => {
  assert.equal(checkTokenId("bigfleet@pve!autoscaler"), "bigfleet@pve!autoscaler");
  assert.equal(checkTokenId("root@pam!ci-1"), "root@pam!ci-1");
  for (
    const bad of [
      "bigfleet",
      "bigfleet@pve",
      "bigfleet!tok",
      "@pve!t",
      "u@!t",
      "u@pve!",
      "u @pve!t",
      "u@pve!t!x",
    ]
  ) {
    assert.throws(() => checkTokenId(bad), /USER@REALM!TOKENID/, bad);
  }
});

Deno.test("proxmox: secret cleaning trims the newline and never echoes", () => {
  assert.equal(cleanSecret("abc-123\n"), "abc-123");
  assert.equal(cleanSecret("abc-123\r\n"), "abc-123");
  assert.equal(cleanSecret("abc-123"), "abc-123");
  assert.throws(() => cleanSecret("\n"), /empty/);
  for (const bad of ["hun ter2", "hun\tter2", "hun\nter2"]) {
    assert.throws(
      () => cleanSecret(bad),
      (e: unknown) => e instanceof Error && !e.message.includes("hun"),
    );
  }
});

Deno.test("proxmox: nodes list", () => {
  assert.deepEqual(parseNodes("pve1,pve2,pve3"), ["pve1", "pve2", "pve3"]);
  assert.deepEqual(parseNodes(" pve1 , pve2 "), ["pve1", "pve2"]);
  assert.throws(() => parseNodes(""), /empty/);
  assert.throws(() => parseNodes("pve1,,pve2"), /empty node name/);
  assert.throws(() => parseNodes("pve1,"), /empty node name/);
  assert.throws(() => parseNodes("pve/1"), /"\/"/);
  assert.throws(() => parseNodes("pve1,pve1"), /listed twice/);
});

Deno.test("proxmox: --proxmox-vmid-range is FIRST-LAST of VMIDs, kept as [lower, upper)", () => {
  assert.deepEqual(parseVmidRange("20000-29999"), { lower: 20000, upper: 30000 });
  assert.deepEqual(parseVmidRange(" 100 - 100 "), { lower: 100, upper: 101 });
  const bad: [string, RegExp][] = [
    ["20000", /want FIRST-LAST \(e\.g\. 20000-29999\), got "20000"/],
    ["a-b", /want FIRST-LAST/],
    ["99-200", /99 is not a VMID \(100-999999999\)/],
    ["100-1000000000", /1000000000 is not a VMID/],
    ["300-200", /300 is above 200: want FIRST-LAST, lowest first/],
  ];
  for (const [text, re] of bad) assert.throws(() => parseVmidRange(text), re, text);
});
