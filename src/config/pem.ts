// Structural PEM checks, so a wrong or empty file fails at startup rather than
// at the first TLS handshake.

/** PEM block labels a private key may carry (encrypted keys cannot be used unattended). */
const KEY_LABELS = ["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"];

const BLOCK = /-----BEGIN ([A-Z0-9 ]+)-----\r?\n([\s\S]*?)-----END ([A-Z0-9 ]+)-----/g;

/** Labels of the well-formed PEM blocks in `text`, in order. */
export function pemLabels(text: string): string[] {
  const labels: string[] = [];
  for (const m of text.matchAll(BLOCK)) {
    if (m[1] !== m[3]) continue;
    const body = m[2].replace(/\s+/g, "");
    if (body === "" || !/^[A-Za-z0-9+/]+={0,2}$/.test(body) || body.length % 4 !== 0) continue;
    labels.push(m[1]);
  }
  return labels;
}

/** True when `text` holds at least one well-formed CERTIFICATE block. */
export function hasCertificate(text: string): boolean {
  return pemLabels(text).includes("CERTIFICATE");
}

/** True when `text` holds a well-formed unencrypted private key block. */
export function hasPrivateKey(text: string): boolean {
  return pemLabels(text).some((label) => KEY_LABELS.includes(label));
}
