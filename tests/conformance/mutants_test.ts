// The suite's own power check: each mutant proxy breaks one rule of the
// contract, and the behaviours that guard that rule must FAIL against it.
// (All of them pass against the real provider in fake_test.ts.)

import assert from "node:assert/strict";
import {
  Code,
  fakeProviderArgs,
  Harness,
  MachineState as St,
  type ProviderProcess,
  startProvider,
} from "../harness/mod.ts";
import { BASELINE_LANE, EXTENSION_LANE } from "./suite.ts";
import { type Mutation, startMutatingProxy } from "./mutating_proxy.ts";

// Off by design: one provider process is shared by every mutant.
const opts = { sanitizeOps: false, sanitizeResources: false };
const byId = new Map([...BASELINE_LANE, ...EXTENSION_LANE].map((b) => [b.id, b]));

let counter = 0;
const sortById = (a: { id: string }, b: { id: string }) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

const MUTANTS: { name: string; mutation: Mutation; caughtBy: string[] }[] = [
  {
    name: "a fresh operation_id on every call",
    mutation: { ack: (a) => ({ ...a, operation_id: `${a.operation_id}-${++counter}` }) },
    caughtBy: ["baseline CreateIdempotent", "B206", "B214", "B401"],
  },
  {
    name: "shard_metadata entries with empty values dropped",
    mutation: {
      machine: (m) => ({
        ...m,
        shard_metadata: Object.fromEntries(
          Object.entries(m.shard_metadata).filter(([, v]) => v !== ""),
        ),
      }),
    },
    caughtBy: ["baseline MetadataUnknownKeysPreservedVerbatim", "B501"],
  },
  {
    name: "fencing rejections reported as INTERNAL",
    mutation: { code: (c) => (c === Code.FAILED_PRECONDITION ? Code.INTERNAL : c) },
    caughtBy: ["baseline FencingUnknownShardAccepted", "B303", "B1201"],
  },
  {
    name: "a host on SPECULATIVE machines",
    mutation: {
      machine: (
        m,
      ) => (m.state === St.SPECULATIVE ? { ...m, host: { provider: "x", ref: "y" } } : m),
    },
    caughtBy: ["B107", "B803"],
  },
  {
    name: "max_results ignored",
    mutation: { list: (f, fwd) => fwd({ ...f, max_results: 0 }) },
    caughtBy: ["baseline ListMaxResults", "B902"],
  },
  {
    name: "a constant revision and no deltas",
    mutation: {
      list: async (f, fwd) => ({
        ...(await fwd({ ...f, since_revision: undefined })),
        revision: new TextEncoder().encode("1"),
      }),
    },
    caughtBy: ["baseline ListRevisionAdvances", "B903", "B904"],
  },
  {
    name: "List in a fixed order",
    mutation: {
      list: async (f, fwd) => {
        const l = await fwd({ ...f, max_results: 0 });
        const ms = l.machines.sort(sortById);
        return { ...l, machines: (f.max_results ?? 0) > 0 ? ms.slice(0, f.max_results) : ms };
      },
    },
    caughtBy: ["B302"],
  },
  {
    name: "an IDLE machine flickers to CONFIGURING on every 7th read",
    mutation: {
      machine: (
        m,
      ) => (m.state === St.IDLE && ++counter % 7 === 0 ? { ...m, state: St.CONFIGURING } : m),
    },
    caughtBy: ["B108"],
  },
];

let real: Promise<ProviderProcess> | undefined;

for (const mutant of MUTANTS) {
  Deno.test({
    name: `[mutant] ${mutant.name}: caught by ${mutant.caughtBy.join(", ")}`,
    ...opts,
    async fn() {
      real ??= startProvider({ args: fakeProviderArgs({ seed: 256 }) });
      const proxy = await startMutatingProxy((await real).addr, mutant.mutation);
      try {
        for (const id of mutant.caughtBy) {
          const b = byId.get(id);
          assert.ok(b, `no behaviour ${id}`);
          const h = new Harness(proxy.addr, { seed: 1 });
          try {
            // An assertion must be what trips, not a transport or setup error.
            await assert.rejects(
              () => b.run(h),
              assert.AssertionError,
              `${id} passed against the mutant`,
            );
          } finally {
            h.close();
          }
        }
      } finally {
        proxy.stop();
      }
    },
  });
}

Deno.test({
  name: "[mutant] stop the provider",
  ...opts,
  async fn() {
    await (await real?.catch(() => undefined))?.stop();
  },
});
