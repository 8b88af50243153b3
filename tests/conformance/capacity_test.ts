// Live capacity changes: a restart on an existing --state with changed
// offerings applies them by the rules in src/kit/slot_changes.ts, through the
// real provider process.

import assert from "node:assert/strict";
import {
  assertCode,
  Code,
  fakeProviderArgs,
  Harness,
  MachineState as St,
  outcome,
  type ProviderProcess,
  startProvider,
  stateName,
  waitFor,
  waitForServing,
} from "../harness/mod.ts";

const opts = { sanitizeOps: false, sanitizeResources: false };

interface Life {
  proc: ProviderProcess;
  h: Harness;
}

async function boot(state: string, offerings: unknown[]): Promise<Life> {
  const file = await Deno.makeTempFile({ suffix: ".json" });
  await Deno.writeTextFile(file, JSON.stringify(offerings));
  const proc = await startProvider({
    args: fakeProviderArgs({ seed: 0, state, extra: [`--offerings=${file}`] }),
  });
  return { proc, h: new Harness(proc.addr, { deadlineMs: 10_000 }) };
}

async function stop(l: Life) {
  l.h.close();
  await l.proc.stop();
}

async function states(h: Harness): Promise<Record<string, string>> {
  const { machines } = await h.list();
  return Object.fromEntries(
    machines.map((m) => [m.id.replace("certify/OnDemand/", ""), stateName(m.state)]),
  );
}

/** The startup line reports the change once the log has it. */
async function capacityLine(proc: ProviderProcess): Promise<string | undefined> {
  return (await waitForServing(proc)).capacity as string | undefined;
}

Deno.test(
  "capacity: a restart applies changed offerings without touching machines in use",
  opts,
  async () => {
    const dir = await Deno.makeTempDir();
    const state = `${dir}/state.kv`;
    const first = [
      { instance_type: "pve.small", zone: "z-a", count: 3 },
      { instance_type: "pve.large", zone: "z-b", count: 2 },
    ];
    const second = [
      { instance_type: "pve.small", zone: "z-a", count: 1 },
      { instance_type: "pve.medium", zone: "z-a", count: 2 },
    ];

    let l = await boot(state, first);
    assert.equal(await capacityLine(l.proc), undefined, "a new fleet reports no change");
    await l.h.create("certify/OnDemand/pve.small/z-a/000");
    await l.h.mustReach("certify/OnDemand/pve.small/z-a/000", St.IDLE);
    await l.h.create("certify/OnDemand/pve.small/z-a/001");
    await l.h.mustReach("certify/OnDemand/pve.small/z-a/001", St.IDLE);
    await l.h.configure("certify/OnDemand/pve.small/z-a/001", "c1", { k: "v" });
    await l.h.mustReach("certify/OnDemand/pve.small/z-a/001", St.CONFIGURED);
    await stop(l);

    l = await boot(state, second);
    assert.equal(await capacityLine(l.proc), "+2 slots, -4 retired, 1 pending");
    assert.deepEqual(await states(l.h), {
      "pve.small/z-a/000": "IDLE",
      "pve.small/z-a/001": "CONFIGURED",
      "pve.medium/z-a/000": "SPECULATIVE",
      "pve.medium/z-a/001": "SPECULATIVE",
    });
    // The retired machine keeps its binding and metadata until the shard lets it go.
    const retired = await l.h.get("certify/OnDemand/pve.small/z-a/001");
    assert.equal(retired.cluster, "c1");
    assert.deepEqual(retired.shard_metadata, { k: "v" });
    await l.h.drain(retired.id);
    await l.h.mustReach(retired.id, St.IDLE);
    await l.h.delete(retired.id);
    let last = "";
    const gone = await waitFor(
      () => `${retired.id} to leave the inventory (still ${last})`,
      async () => {
        const got = await outcome(l.h.get(retired.id));
        if (got.ok) last = stateName(got.value.state);
        return got.ok ? undefined : got;
      },
    );
    assertCode(gone, Code.NOT_FOUND, "a deleted retired machine is gone");
    await stop(l);

    // The same offerings again: nothing to change, the fleet is as it was left.
    l = await boot(state, second);
    assert.equal(await capacityLine(l.proc), "+0 slots, -0 retired, 0 pending");
    assert.deepEqual(await states(l.h), {
      "pve.small/z-a/000": "IDLE",
      "pve.medium/z-a/000": "SPECULATIVE",
      "pve.medium/z-a/001": "SPECULATIVE",
    });
    await stop(l);
    await Deno.remove(dir, { recursive: true });
  },
);
