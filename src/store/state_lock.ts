// One writer per state file. Two providers on the same --state would each keep
// their own fleet in memory and both write the file: a split brain (a machine
// bound twice, fence marks diverging). The owner holds an exclusive advisory
// lock (flock) on `<state>.lock`, a file next to the database; the kernel drops
// it when the owner exits or dies, SIGKILL included, so a restart never waits.
// A second process is refused at once with who holds the lock.
//
// A separate file, not the database itself: SQLite takes its own POSIX locks
// on the database, and on filesystems that emulate flock with POSIX locks (NFS)
// the two would interfere. Advisory locks over network filesystems are only as
// good as the server's lock manager: see docs/configuration.md#one-provider-per-state-file.

export interface StateLock {
  readonly path: string;
  release(): void;
}

export interface Holder {
  pid: number;
  host: string;
  since: string;
}

/** Takes the lock for the state at `statePath`, or throws naming who holds it. */
export async function lockState(statePath: string): Promise<StateLock> {
  const path = `${statePath}.lock`;
  let file: Deno.FsFile;
  try {
    file = await Deno.open(path, { read: true, write: true, create: true });
  } catch (e) {
    throw new Error(`cannot open lock file ${path}: ${e instanceof Error ? e.message : e}`);
  }
  let locked = false;
  try {
    locked = await file.tryLock(true);
  } catch (e) {
    file.close();
    throw new Error(`cannot lock ${path}: ${e instanceof Error ? e.message : e}`);
  }
  if (!locked) {
    file.close();
    throw new Error(`in use by ${describeHolder(await readHolder(path))} (lock file ${path})`);
  }
  // Whoever is refused next reads this to say who holds the state.
  const holder: Holder = { pid: Deno.pid, host: hostname(), since: new Date().toISOString() };
  try {
    await file.truncate(0);
    await file.write(new TextEncoder().encode(JSON.stringify(holder) + "\n"));
  } catch {
    // The lock is what matters; a holder line that cannot be written only makes refusals vaguer.
  }
  let held = true;
  return {
    path,
    release() {
      if (!held) return;
      held = false;
      try {
        file.unlockSync();
      } finally {
        file.close();
      }
    },
  };
}

/** The holder recorded in a lock file, or null when it is missing or unreadable. */
export async function readHolder(lockPath: string): Promise<Holder | null> {
  try {
    const raw = JSON.parse(await Deno.readTextFile(lockPath));
    if (typeof raw.pid !== "number" || typeof raw.host !== "string") return null;
    return { pid: raw.pid, host: raw.host, since: String(raw.since ?? "") };
  } catch {
    return null;
  }
}

function describeHolder(h: Holder | null): string {
  // The holder writes its line just after locking: a refusal in between sees none.
  if (!h) return "another process (its pid is not recorded yet)";
  return `another provider: pid ${h.pid} on host ${h.host} since ${h.since}`;
}

function hostname(): string {
  try {
    return Deno.hostname();
  } catch {
    // Without --allow-sys; the holder line is only for the refusal message.
    return "unknown";
  }
}
