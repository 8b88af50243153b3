// Where the admin socket lives (docs/security.md#the-admin-socket): beside the
// state file unless --admin-socket names it, and how long its path may be.

/** The longest unix socket path (sun_path is 108 bytes with its NUL). */
export const MAX_SOCKET_PATH = 107;

/** The name the socket is bound under before it is renamed into place: `.bfadm-` and 8 hex. */
export const STAGING_NAME_BYTES = 15;

export function stagingName(): string {
  return `.bfadm-${crypto.randomUUID().slice(0, 8)}`;
}

/** The socket beside a state file, when --admin-socket does not name one. */
export function adminSocketFor(statePath: string): string {
  return `${statePath}.admin`;
}
