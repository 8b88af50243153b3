// The black-box conformance suite: the upstream baseline first, then the
// extension lane in the Go suite's file order, all against ONE booted provider
// (seed 256, like the certification runner). One Deno.test per behaviour.

import { Harness, type HarnessOptions, type ProviderProcess, tail } from "../harness/mod.ts";
import type { Behavior } from "./behaviors/behavior.ts";
import { baseline } from "./behaviors/baseline.ts";
import { concurrency } from "./behaviors/concurrency.ts";
import { errors } from "./behaviors/errors.ts";
import { fencing } from "./behaviors/fencing.ts";
import { fieldshape } from "./behaviors/fieldshape.ts";
import { lifecycle } from "./behaviors/lifecycle.ts";
import { list } from "./behaviors/list.ts";
import { metadata } from "./behaviors/metadata.ts";
import { property } from "./behaviors/property.ts";

export interface SuiteOptions {
  /** Leave out the upstream baseline lane. */
  skipBaseline?: boolean;
  /** Harness options (seed for the property tests, dial limits). */
  harness?: HarnessOptions;
  /** Register only the behaviours this accepts (the conformance runner's lanes and --run). */
  only?: (b: Behavior) => boolean;
  /** The provider is someone else's (the runner's --target): never stopped here. */
  attached?: boolean;
  /** Register every test as ignored (a lane that cannot run here says why itself). */
  ignore?: boolean;
  /** Runs after each behaviour, pass or fail (a lane on real VMs cleans up and checks there). */
  after?: (b: Behavior) => Promise<void>;
}

/** Extension lane order: concurrency, errors, fencing, fieldshape, lifecycle, list, metadata, property. */
export const EXTENSION_LANE: readonly Behavior[] = [
  ...concurrency,
  ...errors,
  ...fencing,
  ...fieldshape,
  ...lifecycle,
  ...list,
  ...metadata,
  ...property,
];

export const BASELINE_LANE: readonly Behavior[] = baseline;

export function defineConformanceSuite(
  label: string,
  boot: () => Promise<ProviderProcess>,
  opts: SuiteOptions = {},
): void {
  let booting: Promise<ProviderProcess> | undefined;
  const provider = () => booting ??= boot(); // lazily, in the first test that runs
  // Sanitizers stay off in a lane: its one provider (with the pumps reading
  // its output) outlives every test by design, as in the certification run.
  // If a --filter skips the stop test, the harness kills the child at exit
  // (tests/harness/teardown.ts).

  const behaviors = [...(opts.skipBaseline ? [] : BASELINE_LANE), ...EXTENSION_LANE]
    .filter(opts.only ?? (() => true));
  for (const b of behaviors) {
    Deno.test({
      name: `[${label}] ${b.id} ${b.title}`,
      ignore: opts.ignore,
      sanitizeOps: false,
      sanitizeResources: false,
      async fn() {
        const p = await provider();
        const h = new Harness(p.addr, { seed: 1, ...opts.harness });
        try {
          await b.run(h);
        } catch (e) {
          throw withProviderContext(e, p);
        } finally {
          h.close();
          await opts.after?.(b);
        }
      },
    });
  }

  if (opts.attached) return;
  Deno.test({
    name: `[${label}] stop the provider`,
    ignore: opts.ignore,
    sanitizeOps: false,
    sanitizeResources: false,
    async fn() {
      if (!booting) return;
      const p = await booting.catch(() => undefined);
      await p?.stop();
    },
  });
}

/** A crashed provider explains every later failure: say so in the error. */
function withProviderContext(e: unknown, p: ProviderProcess): unknown {
  const st = p.exitStatus();
  if (!st || !(e instanceof Error)) return e;
  e.message += `\n[provider exited with code ${st.code}; stderr tail]\n${tail(p.stderr(), 20)}`;
  return e;
}
