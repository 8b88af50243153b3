// Connections to a provider process we started are closed only after that
// process has exited. Deno 2.9.6's node:http2 server can abort inside nghttp2
// (`find_stream_on_goaway_func: Assertion stream->closed_next == NULL`,
// denoland/deno#36788) when a Node-style client closes a connection that
// carried a few dozen calls: the client's GOAWAY names last-stream-id 0.
// grpc-go clients (BigFleet, the certification runner) name the highest
// stream id and never trigger it (100,000 calls over 2,300 connections were
// measured clean). The suite's own grpc-js clients would, so they linger
// until the provider is gone instead of saying goodbye to a live one. The
// reverse also aborts (a client receiving the server's GOAWAY), so before a
// graceful SIGTERM/SIGINT the held connections are closed first.

const live = new Map<string, (() => void)[]>();

/** Start holding closes for `addr` (a provider process we own). */
export function holdCloses(addr: string): void {
  if (!live.has(addr)) live.set(addr, []);
}

/** Close now, or later if `addr` is a live provider we own. */
export function closeWhenSafe(addr: string, close: () => void): void {
  const held = live.get(addr);
  if (held) held.push(close);
  else close();
}

/** The provider at `addr` has exited: close everything held for it. */
export function releaseCloses(addr: string): void {
  const held = live.get(addr);
  live.delete(addr);
  for (const close of held ?? []) close();
}
