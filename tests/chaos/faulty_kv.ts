// A Deno KV database whose commits fail on demand, for in-process tests of
// the state store and the kit when the disk is full or read-only. Reads go
// through untouched (a full or read-only disk still reads).

export interface CommitInfo {
  sets: Deno.KvKey[];
  deletes: Deno.KvKey[];
}

export interface KvFaults {
  /** Every commit fails while true. */
  failing: boolean;
  /** Consulted before each commit: true fails it (and `failing` is set from then on). */
  failWhen?: (c: CommitInfo) => boolean;
  /** Commits that went through. */
  readonly commits: CommitInfo[];
  /** Commits refused. */
  refused: number;
  /** What a refused commit says; SQLite's full-disk wording unless set. */
  error: string;
  wrap(kv: Deno.Kv): Deno.Kv;
}

/** SQLite's own wordings for a full disk and a read-only file. */
export const FULL_DISK = "database or disk is full";
export const READ_ONLY = "attempt to write a readonly database";

export function kvFaults(): KvFaults {
  const faults: KvFaults = {
    failing: false,
    commits: [],
    refused: 0,
    error: FULL_DISK,
    wrap(kv) {
      const wrapped = {
        atomic: () => faultyAtomic(kv.atomic(), faults),
        get: kv.get.bind(kv),
        getMany: kv.getMany.bind(kv),
        list: kv.list.bind(kv),
        close: kv.close.bind(kv),
      };
      return wrapped as unknown as Deno.Kv;
    },
  };
  return faults;
}

function faultyAtomic(op: Deno.AtomicOperation, faults: KvFaults): Deno.AtomicOperation {
  const info: CommitInfo = { sets: [], deletes: [] };
  const wrapped = {
    set(key: Deno.KvKey, value: unknown) {
      info.sets.push(key);
      op.set(key, value);
      return wrapped;
    },
    delete(key: Deno.KvKey) {
      info.deletes.push(key);
      op.delete(key);
      return wrapped;
    },
    commit() {
      if (!faults.failing && faults.failWhen?.(info)) faults.failing = true;
      if (faults.failing) {
        faults.refused++;
        return Promise.reject(new Error(faults.error));
      }
      faults.commits.push(info);
      return op.commit();
    },
  };
  return wrapped as unknown as Deno.AtomicOperation;
}

/** Whether a key is the given path, e.g. isKey(k, "meta", "redo"). */
export function isKey(key: Deno.KvKey, ...parts: string[]): boolean {
  return key.length === parts.length && parts.every((p, i) => key[i] === p);
}
