// Just enough PromQL reading for the monitoring tests: which series selectors
// (metric name + label matchers) an expression or a Grafana query uses. Not a
// parser: it relies on the shapes our rules and dashboard use, and the tests
// check it finds what they expect so it cannot pass by finding nothing.

export interface Matcher {
  label: string;
  op: "=" | "!=" | "=~" | "!~";
  value: string;
}

export interface Selector {
  metric: string;
  matchers: Matcher[];
}

// Aggregation modifiers whose parenthesised label lists are not series.
const LABEL_LISTS = /\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g;
const KEYWORDS = new Set(["and", "or", "unless", "bool", "offset", "inf", "nan"]);

function parseMatchers(text: string): Matcher[] {
  const out: Matcher[] = [];
  for (const m of text.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"/g)) {
    out.push({ label: m[1], op: m[2] as Matcher["op"], value: m[3] });
  }
  return out;
}

/** Every series selector in a PromQL expression. */
export function selectors(expr: string): Selector[] {
  const found: Selector[] = [];
  // Range and subquery windows ([5m], [$__rate_interval]) hold no series.
  let s = expr.replace(/\[[^\]]*\]/g, " ");
  // metric{...} and bare {...} selectors, with their matchers.
  s = s.replace(
    /([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}/g,
    (_all, name: string | undefined, body: string) => {
      const matchers = parseMatchers(body);
      const byName = matchers.find((m) => m.label === "__name__" && m.op === "=");
      const metric = name ?? byName?.value;
      if (metric === undefined) throw new Error(`selector without a metric name in: ${expr}`);
      found.push({ metric, matchers: matchers.filter((m) => m.label !== "__name__") });
      return " ";
    },
  );
  s = s.replace(LABEL_LISTS, " ").replace(/"(?:[^"\\]|\\.)*"/g, " ");
  // The lookbehind keeps "e" of 1e-05 and Grafana's $variables out.
  for (const m of s.matchAll(/(?<![\w.:$])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?/g)) {
    const word = m[1];
    // A name followed by "(" is a function or aggregation; keywords are operators.
    if (m[2] !== undefined || KEYWORDS.has(word)) continue;
    found.push({ metric: word, matchers: [] });
  }
  return found;
}

/** Selectors of a Grafana variable query: label_values(<selector>, label) or plain PromQL. */
export function variableSelectors(query: string): Selector[] {
  const lv = query.match(/^\s*label_values\(\s*(.*?)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$/s);
  if (lv) return selectors(lv[1]);
  if (/^\s*label_values\(/.test(query)) {
    throw new Error(`label_values without a selector: ${query}`);
  }
  return selectors(query);
}
