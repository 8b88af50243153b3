// One preflight finding: a check (api, token, node, pool, privileges,
// template, storage, hooks), what it looked at, the verdict, and for anything
// short of PASS the fix. Exit 0 only when nothing FAILs (docs/cli.md#preflight).

export type Status = "PASS" | "WARN" | "FAIL" | "SKIP";

export interface CheckResult {
  check: string;
  /** What was checked: a URL, node, ACL path, instance type/zone, storage. */
  subject: string;
  status: Status;
  message: string;
  /** What to do about it; null on PASS. */
  fix: string | null;
}

export const pass = (check: string, subject: string, message: string): CheckResult => ({
  check,
  subject,
  status: "PASS",
  message,
  fix: null,
});

export const warn = (check: string, subject: string, message: string, fix: string) => ({
  check,
  subject,
  status: "WARN" as const,
  message,
  fix,
});

export const failed = (check: string, subject: string, message: string, fix: string) => ({
  check,
  subject,
  status: "FAIL" as const,
  message,
  fix,
});

export const skipped = (check: string, subject: string, message: string, fix: string | null) => ({
  check,
  subject,
  status: "SKIP" as const,
  message,
  fix,
});

/** `n thing` / `n things`. */
export function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

/** Bytes as GiB with up to one decimal, e.g. "19.5 GiB". */
export function gib(bytes: number): string {
  return `${Number((bytes / 1024 ** 3).toFixed(1))} GiB`;
}

/** An error as one line of a finding; a timeout or abort as "no answer in time". */
export function errText(err: unknown): string {
  if (err instanceof DOMException && (err.name === "TimeoutError" || err.name === "AbortError")) {
    return "no answer in time";
  }
  return (err instanceof Error ? err.message : String(err)).split("\n")[0];
}
