// Configure's work in the guest: check that its agent allows what Configure
// uses, deliver the bootstrap over the guest agent and run the hook on it,
// exactly once (the readiness gate after it is vm/ready.ts).

import { getLogger } from "@logtape/logtape";
import type { Config } from "../config/types.ts";
import { BackendError } from "../kit/backend.ts";
import { commandFailed, runCommand, wipeGuestFiles, writeGuestFile } from "./vm/agent.ts";
import { assertBootstrapAllowed, explainAgentError } from "./vm/guest_caps.ts";
import type { ProxmoxContext } from "./context.ts";
import { type VmAt, vmOf } from "./vm/vm.ts";
import { isTransient } from "./api/errors.ts";

/** Where the bootstrap goes in the guest and the hook that runs it. */
export type BootstrapHook = Pick<Config, "bootstrapPath" | "bootstrapExec">;

/** One Configure's delivery: the hook, the machine it is for and its bootstrap (a secret). */
export interface Bootstrap {
  hook: BootstrapHook;
  machineId: string;
  bootstrap: Uint8Array;
}

const log = getLogger(["bigfleet", "proxmox"]);

/** Write the bootstrap into the guest and run the hook on it, exactly once. */
export async function runBootstrap(
  ctx: ProxmoxContext,
  at: VmAt,
  job: Bootstrap,
  signal: AbortSignal,
): Promise<void> {
  const { timing } = ctx;
  const vm = vmOf(ctx, at);
  const path = job.hook.bootstrapPath;
  // A guest whose agent refuses what Configure uses fails here, before the secret is written.
  await assertBootstrapAllowed(vm, signal);
  const { parts } = await writeGuestFile(vm, path, job.bootstrap, timing.exec, signal).catch(
    (err) => {
      throw explainAgentError(vm.vmid, err) ?? err;
    },
  );
  log.info("bootstrap delivered to VM {vmid} ({bytes} bytes in {parts} writes); running hook", {
    vmid: vm.vmid,
    node: vm.node,
    machineId: job.machineId,
    bytes: job.bootstrap.length,
    parts,
  });
  const argv = [...job.hook.bootstrapExec, path];
  let res;
  try {
    res = await runCommand(vm, argv, timing.exec, signal);
  } catch (err) {
    const refused = explainAgentError(vm.vmid, err);
    if (refused !== null) {
      // Nothing ran: the blob must not stay behind in a guest that cannot run it.
      await wipeGuestFiles(vm, [path], signal);
      throw refused;
    }
    if (isTransient(err)) {
      // exec is not idempotent: a second hook run could join the node twice.
      throw new BackendError(
        `bootstrap hook in VM ${vm.vmid}: lost track of the exec (${
          (err as Error).message
        }); not re-running it`,
      );
    }
    throw err;
  }
  if (res.exitCode !== 0) throw commandFailed(`bootstrap hook ${argv[0]} in VM ${vm.vmid}`, res);
}
