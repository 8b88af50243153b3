// Spawn to first accept: how long a provider command takes until its gRPC port
// accepts a TCP connection (the certification runner's readiness test). The
// child is SIGKILLed once measured. Shared by startup.ts and startup_ab.ts.

/** Milliseconds from spawning `cmd` with `args` and `--addr` on `port` to its port accepting. */
export async function msToAccept(cmd: string[], args: string[], port: number): Promise<number> {
  const t0 = performance.now();
  const child = new Deno.Command(cmd[0], {
    args: [...cmd.slice(1), `--addr=127.0.0.1:${port}`, ...args],
    stdout: "null",
    stderr: "null",
  }).spawn();
  try {
    for (;;) {
      try {
        (await Deno.connect({ hostname: "127.0.0.1", port })).close();
        return performance.now() - t0;
      } catch {
        await new Promise((r) => setTimeout(r, 5));
      }
    }
  } finally {
    child.kill("SIGKILL");
    await child.status;
  }
}
