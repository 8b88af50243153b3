// The work of `machines recover` (flags and help: recover.ts).

import { oneLine, quote } from "../config/errors.ts";
import type { AdminAnswer, AdminMachine } from "../server/admin_wire.ts";
import { adminCall, AdminFailure } from "../client/admin_client.ts";
import { parseAdminCommand } from "./admin_flags.ts";
import {
  type Context,
  EXIT_FAILURE,
  EXIT_NOT_FOUND,
  EXIT_OK,
  EXIT_USAGE,
  fail,
  write,
} from "./command.ts";
import { RECOVER_FLAGS } from "./recover.ts";

type Recovered = AdminAnswer & { ok: true; op: "recover" };

export async function runRecover(args: string[], ctx: Context): Promise<number> {
  const p = parseAdminCommand(RECOVER_FLAGS, args, ctx, "machines recover takes one machine id");
  if (typeof p === "number") return p;
  const { values: v, arg: id, target } = p;
  if (v.destroy === v.adopt) return fail("say what to do: --destroy or --adopt", EXIT_USAGE);
  const action = v.destroy ? "destroy" : "adopt";
  let answer: Recovered;
  try {
    const reply = await adminCall<Recovered>(target, { op: "recover", id, action, apply: v.yes });
    reply.conn.close();
    answer = reply.answer;
  } catch (e) {
    if (!(e instanceof AdminFailure)) throw e;
    if (e.code === "NOT_FOUND") return fail(`machine ${quote(id)} not found`, EXIT_NOT_FOUND);
    return fail(oneLine(e.message), EXIT_FAILURE);
  }
  const was = line(answer.before);
  if (!answer.applied) {
    write(`machine ${was}\nwould ${answer.plan}\nrun again with --yes to do it\n`);
    return EXIT_OK;
  }
  const now = answer.after ? answer.after.state : "removed from the inventory";
  write(`done: ${answer.plan}\nmachine ${answer.before.id}: FAILED → ${now}\n`);
  return EXIT_OK;
}

function line(m: AdminMachine): string {
  const host = m.host !== "" ? `, host ${m.host}` : ", no host known";
  return oneLine(`${m.id} is ${m.state}${host}: ${m.lastError}`);
}
