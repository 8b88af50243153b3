// A small JSON reader that keeps object members as ordered [key, value] pairs.
// JSON.parse reorders integer-like keys and folds duplicates silently; the
// offerings and catalog files are operator input whose order and keys
// (including "__proto__") must survive verbatim.

import { nearest } from "./flags.ts";

export type JsonValue = null | boolean | number | string | JsonValue[] | JsonObject;

/** A JSON object as written: members in file order, never a plain-object lookup. */
export class JsonObject {
  constructor(readonly entries: [string, JsonValue][]) {}
}

/** Parse JSON text; throws Error("... at line L column C") on bad syntax or duplicate keys. */
export function parseJson(text: string): JsonValue {
  const reader = new Reader(text.replace(/^\uFEFF/, ""));
  reader.skipSpace();
  const value = reader.value();
  reader.skipSpace();
  if (!reader.done()) reader.fail("unexpected text after the JSON value");
  return value;
}

/** Human name of a JSON value's kind, for error messages. */
export function kindOf(v: JsonValue): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (v instanceof JsonObject) return "an object";
  return `a ${typeof v}`;
}

/** The members of an object as a Map; throws Error `<where>: want an object, got …` otherwise. */
export function objectFields(v: JsonValue, where: string): Map<string, JsonValue> {
  if (!(v instanceof JsonObject)) throw new Error(`${where}: want an object, got ${kindOf(v)}`);
  return new Map(v.entries);
}

/**
 * Throws Error `<where>: unknown field "x" (did you mean "y"?)` for the first
 * member not in `known`: a misspelt optional field would otherwise be
 * silently ignored.
 */
export function onlyFields(
  fields: ReadonlyMap<string, JsonValue>,
  known: readonly string[],
  where: string,
): void {
  for (const key of fields.keys()) {
    if (known.includes(key)) continue;
    const hint = nearest(key, known);
    const advice = hint ? `did you mean ${JSON.stringify(hint)}?` : `known: ${known.join(", ")}`;
    throw new Error(`${where}: unknown field ${JSON.stringify(key)} (${advice})`);
  }
}

/** A required positive safe integer from a file; throws Error naming `what`. */
export function positiveInt(v: JsonValue | undefined, what: string): number {
  if (v === undefined || v === null) throw new Error(`${what} is required`);
  if (typeof v !== "number") throw new Error(`${what} must be a number, got ${kindOf(v)}`);
  if (!Number.isSafeInteger(v) || v <= 0) {
    throw new Error(`${what} must be a positive integer, got ${v}`);
  }
  return v;
}

const ESCAPES: Record<string, string> = {
  '"': '"',
  "\\": "\\",
  "/": "/",
  b: "\b",
  f: "\f",
  n: "\n",
  r: "\r",
  t: "\t",
};

const LITERALS: readonly [string, JsonValue][] = [["true", true], ["false", false], ["null", null]];
const A_VALUE = "a JSON value (an object, array, string, number, true, false or null)";

const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;

class Reader {
  private pos = 0;
  constructor(private readonly text: string) {}

  done(): boolean {
    return this.pos >= this.text.length;
  }

  fail(problem: string): never {
    const before = this.text.slice(0, this.pos).split("\n");
    const line = before.length;
    const column = before[before.length - 1].length + 1;
    throw new Error(`${problem} at line ${line} column ${column}`);
  }

  skipSpace(): void {
    while (!this.done() && " \t\r\n".includes(this.text[this.pos])) this.pos++;
  }

  /** `expected <what> but found "<the next word>"` (or the end of the file) here. */
  private expected(what: string): never {
    if (this.done()) this.fail(`expected ${what} but the file ends`);
    const found = this.text.slice(this.pos).match(/^\S{1,20}/)?.[0] ?? this.text[this.pos];
    this.fail(`expected ${what} but found ${JSON.stringify(found)}`);
  }

  private expect(word: string): void {
    if (!this.text.startsWith(word, this.pos)) this.expected(JSON.stringify(word));
    this.pos += word.length;
  }

  value(): JsonValue {
    const c = this.text[this.pos];
    if (c === "{") return this.object();
    if (c === "[") return this.array();
    if (c === '"') return this.string();
    for (const [word, v] of LITERALS) {
      if (this.text.startsWith(word, this.pos)) return this.pos += word.length, v;
    }
    NUMBER.lastIndex = this.pos;
    const m = NUMBER.exec(this.text);
    if (!m) this.expected(A_VALUE);
    this.pos += m[0].length;
    return Number(m[0]);
  }

  /** The comma-separated items from an opening bracket (at pos) to `close`; `item` reads one. */
  private items(close: "}" | "]", item: () => void): void {
    this.pos++;
    this.skipSpace();
    if (this.text[this.pos] === close) return void this.pos++;
    for (;;) {
      this.skipSpace();
      item();
      this.skipSpace();
      if (this.text[this.pos] !== ",") break;
      this.pos++;
    }
    if (this.text[this.pos] !== close) {
      this.expected(`${JSON.stringify(",")} or ${JSON.stringify(close)}`);
    }
    this.pos++;
  }

  private object(): JsonObject {
    const entries: [string, JsonValue][] = [];
    const seen = new Set<string>();
    this.items("}", () => {
      if (this.text[this.pos] !== '"') this.expected("a member name in double quotes");
      const keyAt = this.pos;
      const key = this.string();
      if (seen.has(key)) {
        this.pos = keyAt;
        this.fail(`duplicate key ${JSON.stringify(key)}`);
      }
      seen.add(key);
      this.skipSpace();
      this.expect(":");
      this.skipSpace();
      entries.push([key, this.value()]);
    });
    return new JsonObject(entries);
  }

  private array(): JsonValue[] {
    const items: JsonValue[] = [];
    this.items("]", () => items.push(this.value()));
    return items;
  }

  private string(): string {
    this.pos++;
    let out = "";
    for (;;) {
      if (this.done()) this.fail("unterminated string");
      const c = this.text[this.pos++];
      if (c === '"') return out;
      if (c < " ") this.fail("control character in string");
      if (c !== "\\") {
        out += c;
        continue;
      }
      const e = this.text[this.pos++];
      if (e === "u") {
        const hex = this.text.slice(this.pos, this.pos + 4);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) this.fail("bad \\u escape");
        out += String.fromCharCode(parseInt(hex, 16));
        this.pos += 4;
      } else if (e !== undefined && Object.hasOwn(ESCAPES, e)) {
        out += ESCAPES[e];
      } else {
        this.fail("bad escape");
      }
    }
  }
}
