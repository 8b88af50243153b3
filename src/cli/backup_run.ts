// The work of `state backup` (flags and help: state_cmd.ts): ask the provider
// for its copy and write it to FILE through a temporary name (or to stdout).

import { oneLine, quote } from "../config/errors.ts";
import { type AdminAnswer, type Sink, writeAll } from "../server/admin_wire.ts";
import { ADMIN_FLAGS, parseAdminCommand } from "./admin_flags.ts";
import { adminCall, AdminFailure } from "../client/admin_client.ts";
import { type Context, EXIT_FAILURE, EXIT_OK, EXIT_USAGE, fail } from "./command.ts";

type BackedUp = AdminAnswer & { ok: true; op: "backup" };

export async function runBackup(args: string[], ctx: Context): Promise<number> {
  const p = parseAdminCommand(ADMIN_FLAGS, args, ctx, "state backup takes one file (- for stdout)");
  if (typeof p === "number") return p;
  const { arg: file, target } = p;
  const toStdout = file === "-";
  if (!toStdout && await exists(file)) {
    return fail(`${quote(file)} exists: remove it or name another file`, EXIT_USAGE);
  }
  const partial = toStdout ? null : `${file}.partial-${crypto.randomUUID().slice(0, 8)}`;
  let reply;
  try {
    reply = await adminCall<BackedUp>(target, { op: "backup" });
  } catch (e) {
    if (!(e instanceof AdminFailure)) throw e;
    return fail(oneLine(e.message), EXIT_FAILURE);
  }
  const { answer, conn, rest } = reply;
  try {
    const written = partial === null
      ? null
      : await Deno.open(partial, { write: true, createNew: true, mode: 0o600 });
    const out: Sink = written ?? Deno.stdout;
    let got = 0;
    try {
      const put = async (bytes: Uint8Array) => {
        const take = bytes.subarray(0, answer.bytes - got);
        await writeAll(out, take);
        got += take.length;
      };
      await put(rest);
      const buf = new Uint8Array(256 * 1024);
      while (got < answer.bytes) {
        const n = await conn.read(buf);
        if (n === null) break;
        await put(buf.subarray(0, n));
      }
      await written?.sync();
    } finally {
      written?.close();
    }
    if (got !== answer.bytes) {
      throw new Error(`the provider sent ${got} of ${answer.bytes} bytes`);
    }
    if (partial !== null) await Deno.rename(partial, file);
  } catch (e) {
    if (partial !== null) await Deno.remove(partial).catch(() => {});
    return fail(`backup not written: ${oneLine((e as Error).message)}`, EXIT_FAILURE);
  } finally {
    conn.close();
  }
  console.error(
    `state backup: ${answer.machines} machines, ${answer.fences} fence marks, revision ` +
      `${answer.revision}: ${answer.bytes} bytes to ${toStdout ? "stdout" : file}`,
  );
  return EXIT_OK;
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.lstat(path);
    return true;
  } catch (e) {
    if (e instanceof Deno.errors.NotFound) return false;
    throw e;
  }
}
