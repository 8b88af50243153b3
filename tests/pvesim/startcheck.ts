// What refuses a start after its pending changes are applied, in the order
// vm_start meets it (qemu-server config_to_command, then QEMU itself):
// - more vCPUs (sockets × cores) than the node has: `MAX <cpus> vcpus allowed
//   per VM on this node`;
// - a virtio NIC's bridge or MTU (print_netdevice_full; PVE 9 reads every
//   virtio NIC's bridge MTU, PVE 8 only when `mtu` is set): `bridge '<b>'
//   does not exist`, `netdev netN: MTU '<m>' is smaller than the IP minimum
//   MTU '576'`, `… is bigger than the bridge MTU '<b>'`; `mtu` on another model
//   is only warned about;
// - QEMU exiting (the task then fails `start failed: QEMU exited with code 1`,
//   QEMU's stderr in the log): the pve-bridge script for a bridge the node
//   lacks, and guest RAM the kernel will not map. Linux's default heuristic
//   overcommit (vm.overcommit_memory=0, mm/util.c __vm_enough_memory) only
//   refuses one mapping larger than RAM + swap, so a guest whose memory
//   exceeds the node's memory + swap cannot start while any number of guests
//   that each fit start fine and overcommit the node (seen on PVE 8.4).

import { TaskFailure } from "./errors.ts";
import { nodeBridges, nodeSpec, vmMemoryMib } from "./capacity.ts";
import { type Nic, parseNic } from "./nic.ts";
import type { SimCore } from "./router.ts";
import type { VmRecord } from "./state.ts";

const QEMU_FAILED = "start failed: QEMU exited with code 1";

/** config_to_command's NIC checks; returns QEMU's stderr lines for the NICs it cannot plug. */
function checkNics(core: SimCore, vm: VmRecord, log: string[]): string[] {
  const bridges = nodeBridges(core, vm.node);
  const pve9 = Number(core.pveVersion.split(".")[0]) >= 9;
  const qemuErrors: string[] = [];
  const nets = Object.keys(vm.config).filter((k) => /^net\d+$/.test(k))
    .sort((a, b) => Number(a.slice(3)) - Number(b.slice(3)));
  for (const key of nets) {
    let nic: Nic;
    try {
      nic = parseNic(String(vm.config[key]));
    } catch {
      continue; // parse_net only warns about a value it cannot read: the NIC is left out
    }
    const bridge = nic.props.bridge;
    const mtu = nic.props.mtu === undefined ? undefined : Number(nic.props.mtu);
    if (nic.model === "virtio" && bridge !== undefined && (pve9 || mtu !== undefined)) {
      const bridgeMtu = bridges[bridge];
      if (bridgeMtu === undefined) throw new TaskFailure(`bridge '${bridge}' does not exist`);
      if (mtu !== undefined && mtu !== 1 && mtu < 576) {
        throw new TaskFailure(
          `netdev ${key}: MTU '${mtu}' is smaller than the IP minimum MTU '576'`,
        );
      }
      if (mtu !== undefined && mtu > bridgeMtu) {
        throw new TaskFailure(
          `netdev ${key}: MTU '${mtu}' is bigger than the bridge MTU '${bridgeMtu}'`,
        );
      }
    } else if (mtu !== undefined) {
      log.push(
        `WARN: netdev ${key}: ignoring MTU '${mtu}', not using VirtIO or no bridge configured.`,
      );
    }
    if (bridge !== undefined && bridges[bridge] === undefined) {
      // The pve-bridge ifup script dies reading the bridge's MTU (errno ENOENT: exit 2).
      const vhost = nic.model === "virtio" ? ",vhost=on" : "";
      qemuErrors.push(
        `bridge '${bridge}' does not exist`,
        `kvm: -netdev type=tap,id=${key},ifname=tap${vm.vmid}i${key.slice(3)},` +
          `script=/var/lib/qemu-server/pve-bridge,downscript=/var/lib/qemu-server/pve-bridgedown` +
          `${vhost}: network script /var/lib/qemu-server/pve-bridge failed with status 512`,
      );
    }
  }
  return qemuErrors;
}

/** Throws the start task's failure (its log lines pushed first), or returns when the VM can run. */
export function assertStartable(core: SimCore, vm: VmRecord, log: string[]): void {
  const spec = nodeSpec(core.state, vm.node);
  const maxcpus = Number(vm.config.sockets ?? 1) * Number(vm.config.cores ?? 1);
  if (maxcpus > spec.cpus) {
    throw new TaskFailure(`MAX ${spec.cpus} vcpus allowed per VM on this node`);
  }
  const qemuErrors = checkNics(core, vm, log);
  if (qemuErrors.length > 0) {
    log.push(...qemuErrors.slice(0, 2));
    throw new TaskFailure(QEMU_FAILED);
  }
  if (vmMemoryMib(vm.config) > spec.memoryMib + spec.swapMib) {
    log.push("kvm: cannot set up guest memory 'pc.ram': Cannot allocate memory");
    throw new TaskFailure(QEMU_FAILED);
  }
}
