// Limits of the gRPC listener, per connection and overall. What each one
// protects against and how the numbers were chosen: docs/security.md#listener-limits.

const MIB = 1024 * 1024;

export interface ListenerLimits {
  /** Open TCP connections; beyond it the oldest one still in its handshake is dropped. */
  maxConnections: number;
  /** TLS handshake plus the HTTP/2 client preface must finish within this. */
  handshakeTimeoutMs: number;
  /**
   * Response bytes a client may leave unread before its connection is closed.
   * Plaintext only: Deno's TLS socket queues writes without reporting them.
   */
  maxUnreadBytes: number;
}

export interface SessionLimits {
  maxConcurrentStreams: number;
  /** Largest request message; responses are never capped. */
  maxReceiveBytes: number;
  /** The server pings a connection this often and drops it when no answer comes in keepaliveTimeoutMs. */
  keepaliveTimeMs: number;
  keepaliveTimeoutMs: number;
  /** A connection with no call for this long is closed (GOAWAY). */
  idleTimeoutMs: number;
}

export const LISTENER_LIMITS: ListenerLimits = {
  maxConnections: 512,
  handshakeTimeoutMs: 10_000,
  maxUnreadBytes: 32 * MIB,
};

export const SESSION_LIMITS: SessionLimits = {
  maxConcurrentStreams: 100,
  maxReceiveBytes: 16 * MIB,
  keepaliveTimeMs: 60_000,
  keepaliveTimeoutMs: 20_000,
  idleTimeoutMs: 15 * 60_000,
};
