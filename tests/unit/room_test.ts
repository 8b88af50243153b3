// The room of each node (src/proxmox/room/): what counts as held, the
// operator's policy, reservations of accepted Creates, and the refusals.

import assert from "node:assert/strict";
import { roomPolicy } from "../../src/config/room.ts";
import type { InstanceType } from "../../src/config/types.ts";
import { BackendMemory } from "../../src/proxmox/memory.ts";
import { createRoom, type ListedGuest, type Room } from "../../src/proxmox/room/room.ts";
import { nodeStatesOf } from "../../src/proxmox/room/counted.ts";

const MIB = 1024 * 1024;
const T = { kind: "vmid", vmid: 9000 } as const;
const type = (name: string, vcpu: number, memoryMib: number): InstanceType => ({
  name,
  vcpu,
  memoryMib,
  template: T,
});
const HALF = type("half", 4, 12052);
const SMALL = type("small", 2, 4096);
const BIG = type("big", 8, 25129);

interface Fixture {
  room: Room;
  memory: BackendMemory;
  clock: { t: number };
  list(guests: ListedGuest[], nodes?: Record<string, [number, number] | string>): void;
}

/** pve1 as the real node of issue 26 (24,105 MiB, 8 CPUs), pve2 64 GiB / 16 CPUs. */
function fixture(texts: Parameters<typeof roomPolicy>[0] = {}): Fixture {
  const memory = new BackendMemory();
  const clock = { t: 1_000_000 };
  const catalog = new Map([HALF, SMALL, BIG].map((t) => [t.name, t]));
  const room = createRoom({
    policy: roomPolicy(texts, ["pve1", "pve2"]),
    catalog,
    offered: new Map([["pve1", ["half", "small"]], ["pve2", ["small"]]]),
    memory,
    settleMs: 15_000,
    refreshMs: 5_000,
    now: () => clock.t,
  });
  const list: Fixture["list"] = (guests, nodes = {}) => {
    const spec = { pve1: [24105, 8], pve2: [65536, 16], ...nodes } as Record<
      string,
      [number, number] | string
    >;
    room.observe({
      requestedAt: clock.t,
      guests,
      nodes: nodeStatesOf(
        Object.entries(spec).map(([node, v]) =>
          typeof v === "string"
            ? { node, status: v }
            : { node, status: "online", maxmem: v[0] * MIB, maxcpu: v[1] }
        ),
      ),
    });
  };
  return { room, memory, clock, list };
}

const guest = (vmid: number, memMib: number, over: Partial<ListedGuest> = {}): ListedGuest => ({
  vmid,
  node: "pve1",
  status: "running",
  name: `vm-${vmid}`,
  template: 0,
  maxmem: memMib * MIB,
  maxcpu: 2,
  ...over,
});

const zone = (room: Room, z = "pve1") => room.report().find((r) => r.zone === z)!;

Deno.test("room: a foreign VM running on 60% of the node leaves no room for half of it; stopped, it does", () => {
  const f = fixture();
  f.list([guest(500, 14463)]);
  const refusal = f.room.admit("m1", HALF, "pve1");
  assert.match(
    refusal ?? "",
    /^zone pve1: node pve1 has no room for half: it needs 12052 MiB and 4 vCPUs, 7594 MiB and 30 vCPUs free/,
  );
  f.clock.t += 1000;
  f.list([guest(500, 14463, { status: "stopped" })]);
  assert.equal(f.room.admit("m1", HALF, "pve1"), null);
});

Deno.test("room: what counts — running or paused VMs, HA started or onboot stopped ones, ours whatever state; never templates", () => {
  const f = fixture();
  f.memory.created(610, "proxmox/OnDemand/small/pve1/000");
  f.list([
    guest(600, 1000), // running
    guest(601, 1000, { status: "paused" }),
    guest(602, 1000, { status: "stopped" }), // not counted
    guest(603, 1000, { status: "stopped", hastate: "started" }),
    guest(604, 1000, { status: "stopped" }), // onboot, below
    guest(605, 1000, { status: "stopped", template: 1 }),
    guest(606, 1000, { status: "running", template: 1 }),
    guest(607, 1000, { status: "stopped", name: "bigfleet-x" }), // ours by name
    guest(608, 1000, { status: "stopped", tags: "bigfleet;k8s" }), // ours by tag
    guest(610, 1000, { status: "stopped" }), // ours: known to the backend
  ]);
  assert.equal(zone(f.room).memoryMib.held, 6000);
  assert.deepEqual(
    f.room.stoppedOthers().map((g) => g.vmid),
    [602, 604],
  );
  f.room.onbootRead(new Map([[602, false], [604, true]]));
  assert.equal(zone(f.room).memoryMib.held, 7000);
  assert.equal(zone(f.room).vcpus.held, 14);
});

Deno.test("room: policy — reserve, memory and CPU overcommit, per node; a VM never has more vCPUs than CPUs", () => {
  const plain = fixture();
  plain.list([]);
  // (24105 − 2048) × 1.0; 8 CPUs × 4.
  assert.deepEqual(zone(plain.room).memoryMib, { capacity: 22057, held: 0, free: 22057 });
  assert.deepEqual(zone(plain.room).vcpus, { capacity: 32, held: 0, free: 32 });
  const tuned = fixture({
    memoryOvercommit: "1.0,pve1=1.5",
    memoryReserve: "10%",
    cpuOvercommit: "0",
  });
  tuned.list([]);
  assert.equal(zone(tuned.room).memoryMib.capacity, Math.floor((24105 - 2411) * 1.5));
  assert.equal(zone(tuned.room, "pve2").memoryMib.capacity, 65536 - 6554);
  assert.deepEqual(zone(tuned.room).vcpus, { capacity: null, held: 0, free: null });
  const wide = type("wide", 12, 1024);
  assert.match(
    tuned.room.admit("m", wide, "pve1") ?? "",
    /wide has 12 vCPUs and node pve1 has 8 CPUs \(Proxmox starts no VM with more vCPUs/,
  );
  assert.equal(tuned.room.neverFits(BIG, "pve1"), null, "25,129 MiB fits (24105 − 10%) × 1.5");
  assert.match(plain.room.neverFits(BIG, "pve1") ?? "", /big needs 25129 MiB and 8 vCPUs/);
});

Deno.test("room: parallel admissions hold their room, so together they never overcommit", () => {
  const f = fixture();
  f.list([]);
  // 22,057 MiB free: five 4 GiB machines fit, the sixth does not.
  const answers = [1, 2, 3, 4, 5, 6].map((i) => f.room.admit(`m${i}`, SMALL, "pve1"));
  assert.deepEqual(answers.slice(0, 5), [null, null, null, null, null]);
  assert.match(answers[5] ?? "", /has no room for small/);
  assert.equal(zone(f.room).fits.small, 0);
  // A repeated admission of a held machine holds nothing more.
  assert.equal(f.room.admit("m1", SMALL, "pve1"), null);
  assert.equal(zone(f.room).memoryMib.held, 5 * 4096);
});

Deno.test("room: a reservation's VM counts once, at the larger of the two, until a settled listing", () => {
  const f = fixture();
  f.list([]);
  assert.equal(f.room.admit("m1", SMALL, "pve1"), null);
  // The clone is listed (at the template's 2 GiB) while it runs: 4 GiB held, not 6.
  f.memory.cloneStarted(700, "m1");
  f.clock.t += 1000;
  f.list([guest(700, 2048, { status: "stopped", name: undefined })]);
  assert.equal(zone(f.room).memoryMib.held, 4096);
  f.room.vmMade("m1", 700);
  f.memory.cloneEnded(700);
  f.memory.created(700, "m1");
  f.room.createEnded("m1");
  // Sized to 4 GiB but pvestatd still shows 2 GiB: still the reservation's 4 GiB.
  f.clock.t += 5_000;
  f.list([guest(700, 2048)]);
  assert.equal(zone(f.room).memoryMib.held, 4096);
  // A listing asked for 15 s after the end is trusted: the VM alone (6 GiB after a resize).
  f.clock.t += 15_000;
  f.list([guest(700, 6144)]);
  assert.equal(zone(f.room).memoryMib.held, 6144);
  // Deleted: nothing held at once, before any listing.
  f.room.vmGone(700);
  assert.equal(zone(f.room).memoryMib.held, 0);
});

Deno.test("room: a Create that made no VM gives its room back when it ends", () => {
  const f = fixture();
  f.list([]);
  f.room.admit("m1", HALF, "pve1");
  assert.equal(zone(f.room).memoryMib.held, 12052);
  f.room.createEnded("m1");
  assert.equal(zone(f.room).memoryMib.held, 0);
});

Deno.test("room: the check before a clone leaves out the Create's own reservation", () => {
  const f = fixture();
  f.list([]);
  assert.equal(f.room.admit("m1", HALF, "pve1"), null);
  assert.equal(f.room.recheck("m1", HALF, "pve1"), null);
  // A foreign VM started meanwhile: the fresh listing refuses.
  f.clock.t += 1000;
  f.list([guest(500, 14463)]);
  assert.match(f.room.recheck("m1", HALF, "pve1") ?? "", /^zone pve1: node pve1 has no room/);
});

Deno.test("room: an offline node, one without status and one the token cannot see are refused with the fix", () => {
  const f = fixture();
  f.list([], { pve1: "offline" });
  assert.equal(
    f.room.admit("m1", SMALL, "pve1"),
    "zone pve1: node pve1 is offline in the cluster: nothing is cloned there until it is back",
  );
  f.clock.t += 1;
  f.list([], { pve1: "unknown" });
  assert.match(f.room.admit("m1", SMALL, "pve1") ?? "", /node pve1 reports no status/);
  f.clock.t += 1;
  // Online but no figures: listed to a token without Sys.Audit on /nodes/pve1.
  f.room.observe({
    requestedAt: f.clock.t,
    guests: [],
    nodes: nodeStatesOf([{ node: "pve1", status: "online" }]),
  });
  assert.match(
    f.room.admit("m1", SMALL, "pve1") ?? "",
    /cannot see node pve1's memory and CPUs: grant it Sys.Audit on \/nodes\/pve1/,
  );
  assert.equal(zone(f.room).fits.small, 0);
});

Deno.test("room: before any listing admission holds and the check before the clone decides", () => {
  const f = fixture();
  assert.equal(f.room.admit("m1", SMALL, "pve1"), null);
  assert.match(
    f.room.recheck("m1", SMALL, "pve1") ?? "",
    /node list \(GET \/nodes\) could not be read/,
  );
});

Deno.test("room: a refusal refreshes the listing once it is older than the refresh interval", async () => {
  const f = fixture();
  let refreshes = 0;
  f.room.setRefresher(() => {
    refreshes++;
    return Promise.resolve();
  });
  f.list([guest(500, 14463)]);
  f.room.admit("m1", HALF, "pve1");
  assert.equal(refreshes, 0, "a fresh listing is not asked again");
  f.clock.t += 6_000;
  f.room.admit("m1", HALF, "pve1");
  f.room.admit("m2", HALF, "pve1");
  assert.equal(refreshes, 1, "one refresh at a time");
  await Promise.resolve();
});

Deno.test("room: a listing older than the newest seen is ignored", () => {
  const f = fixture();
  f.list([guest(500, 14463)]);
  f.room.observe({ requestedAt: f.clock.t - 1, guests: [], nodes: null });
  assert.equal(zone(f.room).memoryMib.held, 14463);
});
