// Names that become one segment of a machine id,
// `<provider>/OnDemand/<instance type>/<zone>/<NNN>`: the provider label,
// instance type names, zones and node names.

import { quote } from "./errors.ts";

/**
 * `text` if it can be a machine id segment: not blank, no "/" (the
 * separator), no whitespace. Throws Error `<what> is empty` or
 * `<what> "x" must not contain ...` (`what` may be "": the caller names it).
 */
export function checkSegment(text: string, what = ""): string {
  const subject = what === "" ? "" : `${what} `;
  if (text.trim() === "") throw new Error(`${subject}is empty`);
  if (/[\/\s]/.test(text)) {
    throw new Error(`${subject}${quote(text)} must not contain "/" or whitespace`);
  }
  return text;
}
