// One registered conformance check: an id (B-number or baseline name), a title,
// and a body that drives the provider through a Harness.

import type { Harness } from "../../harness/mod.ts";

export interface Behavior {
  id: string;
  title: string;
  run(h: Harness): Promise<void>;
}
