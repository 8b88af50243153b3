// Tests that need a tool this machine may lack (a shell, systemd-analyze,
// shellcheck) are registered with `ignore` decided here, so a missing tool
// shows as an ignored test with its reason, never as a pass.

/** Whether `cmd` is on PATH. */
export function onPath(cmd: string): boolean {
  try {
    return new Deno.Command("sh", { args: ["-c", `command -v ${cmd}`], stdout: "null" })
      .outputSync().success;
  } catch {
    return false;
  }
}

/**
 * `ignore` for a test that needs `cmd`: false when it is on PATH, else true,
 * with the reason printed once (`ignored: <test>: <cmd> is not installed (<install>)`).
 */
export function ignoreWithout(test: string, cmd: string, install: string): boolean {
  if (onPath(cmd)) return false;
  console.warn(`ignored: ${test}: ${cmd} is not installed (${install})`);
  return true;
}
