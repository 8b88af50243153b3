// The lane's template: our own guest image (tests/realpve/guest/), built once
// per content hash of its inputs (the builder, the guest's files, the Debian
// package versions it would use) into a cache directory, and registered with
// the real `qm` as VM 9100. Only root@pam may set `args` (the kernel and
// initramfs), so it goes through the rig's exec, not the API.

import { REPO, rig, run } from "./rig.ts";

export const TEMPLATE_VMID = 9100;
const GUEST_DIR = `${REPO}/tests/realpve/guest`;
/** Where the lane keeps what outlives one test file (each runs in its own isolate). */
export const CACHE = `${
  Deno.env.get("XDG_CACHE_HOME") ?? `${Deno.env.get("HOME") ?? "/root"}/.cache`
}/bigfleet-realpve-guest`;

export async function sha256(data: string | Uint8Array): Promise<string> {
  const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
  const d = await crypto.subtle.digest("SHA-256", bytes as Uint8Array<ArrayBuffer>);
  return [...new Uint8Array(d)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

async function filesUnder(dir: string, base = dir): Promise<string[]> {
  const out: string[] = [];
  for await (const e of Deno.readDir(dir)) {
    const p = `${dir}/${e.name}`;
    if (e.isDirectory) out.push(...await filesUnder(p, base));
    else if (e.isFile) out.push(p.slice(base.length + 1));
  }
  return out.sort();
}

async function sh(args: string[]): Promise<string> {
  const out = await new Deno.Command("sh", { args, stdout: "piped", stderr: "piped" }).output();
  const dec = new TextDecoder();
  if (!out.success) throw new Error(`${args.join(" ")}: ${dec.decode(out.stderr).trim()}`);
  return dec.decode(out.stdout);
}

/**
 * The package versions the builder would use. Asking apt takes seconds, so
 * the answer is kept per state of apt's package lists.
 */
async function packageInputs(): Promise<string> {
  let lists = "";
  try {
    for await (const e of Deno.readDir("/var/lib/apt/lists")) {
      if (!e.name.endsWith("Packages")) continue;
      const st = await Deno.stat(`/var/lib/apt/lists/${e.name}`);
      lists += `${e.name} ${st.size} ${st.mtime?.getTime()}\n`;
    }
  } catch { /* no lists yet: the builder runs apt-get update */ }
  const key = (await sha256(lists.split("\n").sort().join("\n"))).slice(0, 16);
  const file = `${CACHE}/inputs-${key}`;
  try {
    return await Deno.readTextFile(file);
  } catch {
    const inputs = await sh([`${GUEST_DIR}/build.sh`, "inputs"]);
    await Deno.mkdir(CACHE, { recursive: true });
    await Deno.writeTextFile(file, inputs);
    return inputs;
  }
}

/** The content hash of everything the image is made from. */
async function imageHash(): Promise<string> {
  let all = "";
  for (const f of await filesUnder(GUEST_DIR)) {
    all += `${f}\n${await sha256(await Deno.readFile(`${GUEST_DIR}/${f}`))}\n`;
  }
  all += await packageInputs();
  return (await sha256(all)).slice(0, 16);
}

/** Holds an exclusive lock on the cache while `fn` runs (two test processes may race). */
async function locked<T>(fn: () => Promise<T>): Promise<T> {
  await Deno.mkdir(CACHE, { recursive: true });
  const f = await Deno.open(`${CACHE}/lock`, { create: true, write: true });
  try {
    await f.lock(true);
    return await fn();
  } finally {
    f.close();
  }
}

async function built(dir: string): Promise<boolean> {
  try {
    await Deno.stat(`${dir}/initrd.gz`);
    await Deno.stat(`${dir}/vmlinuz`);
    return true;
  } catch {
    return false;
  }
}

export interface Template {
  vmid: number;
  /** Content hash of the image. */
  hash: string;
  /** Where vmlinuz and initrd.gz are. */
  dir: string;
  /** Whether this call built the image or registered the template. */
  builtNow: boolean;
  registeredNow: boolean;
}

let once: Promise<Template> | undefined;

/** Build the guest if its hash is new, and (re)register template 9100 if it is not that image. */
export function laneTemplate(): Promise<Template> {
  return once ??= locked(async () => {
    await rig();
    const hash = await imageHash();
    const dir = `${CACHE}/${hash}`;
    let builtNow = false;
    if (!(await built(dir))) {
      await Deno.remove(`${dir}.tmp`, { recursive: true }).catch(() => {});
      await sh([`${GUEST_DIR}/build.sh`, "build", `${dir}.tmp`]);
      await Deno.rename(`${dir}.tmp`, dir);
      builtNow = true;
    }
    const registeredNow = await register(TEMPLATE_VMID, hash, dir, "bigfleet-lane-guest", null);
    return { vmid: TEMPLATE_VMID, hash, dir, builtNow, registeredNow };
  });
}

/**
 * Register our guest as template `vmid` unless it already is this image; whether it was (re)made.
 * `dataMiB`: a raw disk of that much random data instead of the empty qcow2.
 */
async function register(
  vmid: number,
  hash: string,
  dir: string,
  name: string,
  dataMiB: number | null,
): Promise<boolean> {
  const marker = `guest-image=${hash}`;
  const id = String(vmid);
  const current = await run("qm", "config", id).catch(() => null);
  if (current !== null && current.includes(marker) && /^template: 1$/m.test(current)) return false;
  // These VMIDs are the lane's own: an older image's template is replaced.
  if (current !== null) await run("qm", "destroy", id, "--purge", "1");
  await run(
    "qm",
    "create",
    id,
    "--name",
    name,
    "--description",
    `BigFleet real-PVE lane template (tests/realpve/guest), ${marker}`,
    "--kvm",
    "0",
    "--agent",
    "1",
    // 2 cores, 256 MiB: the lane's instance type asks for other values, so sizing shows.
    "--cores",
    "2",
    "--memory",
    "256",
    "--ostype",
    "l26",
    "--scsihw",
    "virtio-scsi-pci",
    "--scsi0",
    dataMiB === null ? "local:1,format=qcow2" : "local:1,format=raw",
    "--serial0",
    "socket",
    "--vga",
    "serial0",
    "--args",
    `-kernel ${dir}/vmlinuz -initrd ${dir}/initrd.gz -append "console=ttyS0 quiet panic=-1"`,
  );
  if (dataMiB !== null) {
    await run(
      "dd",
      "if=/dev/urandom",
      `of=/var/lib/vz/images/${id}/vm-${id}-disk-0.raw`,
      "bs=1M",
      `count=${dataMiB}`,
      "conv=notrunc",
      "status=none",
    );
  }
  await run("qm", "template", id);
  return true;
}

/**
 * Our guest with a disk of 64 MiB random data (the guest runs from its
 * initramfs and never reads it), as template 9102: a full clone of it copies
 * its disk for long enough that a test can catch the clone in its first
 * phase, where `qemu-img convert` runs under the clone's temporary config.
 */
export const DATA_TEMPLATE_VMID = 9102;

let dataOnce: Promise<number> | undefined;
export function dataTemplate(): Promise<number> {
  return dataOnce ??= (async () => {
    const t = await laneTemplate();
    await locked(() => register(DATA_TEMPLATE_VMID, t.hash, t.dir, "bigfleet-lane-data", 64));
    return DATA_TEMPLATE_VMID;
  })();
}
