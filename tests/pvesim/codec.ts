// pve-common's encode_text / decode_text, which turn the VM description into
// `#` comment lines of the config file and back. decode_text URI-unescapes
// every `%XX`; encode_text escapes control, non-ASCII and ':' characters, and
// since pve-common 8.2 also '%'. Before that, a description holding `%41`
// reads back as `A` (SimOptions.pveVersion selects the behaviour).

/** Whether this PVE release's pve-common leaves '%' unescaped in config comments. */
export function legacyTextCodec(pveVersion: string): boolean {
  const [major, minor] = pveVersion.split(".").map((x) => Number(x));
  return major < 8 || (major === 8 && (minor ?? 0) < 2);
}

function encodeText(line: string, escapePercent: boolean): string {
  let out = "";
  for (const b of new TextEncoder().encode(line)) {
    const safe = b >= 0x20 && b <= 0x7e && b !== 0x3a && (b !== 0x25 || !escapePercent);
    out += safe ? String.fromCharCode(b) : "%" + b.toString(16).toUpperCase().padStart(2, "0");
  }
  return out;
}

function decodeText(data: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < data.length; i++) {
    const hex = data.slice(i + 1, i + 3);
    if (data[i] === "%" && /^[0-9A-Fa-f]{2}$/.test(hex)) {
      bytes.push(parseInt(hex, 16));
      i += 2;
    } else {
      // Characters here are ASCII: encode_text escaped everything else.
      for (const b of new TextEncoder().encode(data[i])) bytes.push(b);
    }
  }
  return new TextDecoder().decode(new Uint8Array(bytes));
}

/** The description as GET config shows it after it was written as `desc`. */
export function descriptionAsRead(desc: string, pveVersion: string): string {
  const escapePercent = !legacyTextCodec(pveVersion);
  return desc.split("\n").map((l) => decodeText(encodeText(l, escapePercent))).join("\n");
}
