// Last-resort cleanup when the test process exits. Lanes boot a provider in
// the first test that needs it and stop it in a final "stop" test, which
// `deno test --filter` may skip; a child process would then outlive the run
// (holding its port and state file). `unload` fires on every normal exit of
// the test process, filtered or not, but runs synchronously: only synchronous
// work (SIGKILL, removeSync) belongs here.

const actions = new Set<() => void>();

addEventListener("unload", () => {
  for (const action of actions) {
    try {
      action();
    } catch { /* best effort: the process is going away */ }
  }
});

/** Runs `action` at exit unless the returned function is called first. */
export function atExit(action: () => void): () => void {
  actions.add(action);
  return () => actions.delete(action);
}
