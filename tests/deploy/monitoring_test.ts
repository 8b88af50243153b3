// The chart's optional monitoring objects, rendered by a real `helm template`:
// the ServiceMonitor, the PrometheusRule (the alert rules of
// docs/observability.md, scoped to the release) and the Grafana dashboard
// ConfigMap; and that every metric and label they use is one a real provider
// process exports on /metrics.

import assert from "node:assert/strict";
import { status as grpcStatus } from "@grpc/grpc-js";
import { parse as parseYaml } from "yaml";
import { Harness, outcome } from "../harness/mod.ts";
import { httpGet, startWithMetrics } from "../server/helpers.ts";
import { API_OPS } from "../../src/server/metrics.ts";
import { STATE_NAMES } from "../../src/kit/model.ts";
import {
  CHART,
  EXAMPLES,
  kinds,
  type Manifest,
  NAMESPACE,
  one,
  RELEASE,
  render,
  ROOT,
} from "./helm_helpers.ts";
import { type Selector, selectors, variableSelectors } from "./promql.ts";

const MINIMAL = ["-f", `${EXAMPLES}/values-minimal.yaml`];
const NAME = RELEASE;
const SM = ["--set", "monitoring.serviceMonitor.enabled=true"];
const PR = ["--set", "monitoring.prometheusRule.enabled=true"];
const DASH = ["--set", "monitoring.dashboard.enabled=true"];
const RULES_FILE = `${CHART}/files/prometheus-rules.yaml`;
const DASHBOARD_FILE = `${CHART}/files/grafana-dashboard.json`;
const DOC_JOB = 'job="bigfleet-proxmox"';

interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels: Record<string, string>;
  annotations: Record<string, string>;
}
interface RuleGroup {
  name: string;
  rules: Rule[];
}

async function fileRules(): Promise<RuleGroup[]> {
  return parseYaml(await Deno.readTextFile(RULES_FILE)).groups;
}

/** The yaml block of docs/observability.md § Alert rules. */
async function docRules(): Promise<RuleGroup[]> {
  const doc = await Deno.readTextFile(`${ROOT}docs/observability.md`);
  const section = doc.slice(doc.indexOf("\n## Alert rules"));
  const block = section.match(/```yaml\n([\s\S]*?)```/);
  assert.ok(block, "docs/observability.md § Alert rules has a yaml block");
  return parseYaml(block[1]).groups;
}

function alertNames(groups: RuleGroup[]): string[] {
  return groups.flatMap((g) => g.rules.map((r) => r.alert));
}

function renderedGroups(ms: Manifest[]): RuleGroup[] {
  return one(ms, "PrometheusRule").spec.groups;
}

/** The rules with the documented job replaced, as the chart must render them. */
function withJob(groups: RuleGroup[], job: string): RuleGroup[] {
  return groups.map((g) => ({
    ...g,
    rules: g.rules.map((r) => ({ ...r, expr: r.expr.replaceAll(DOC_JOB, `job="${job}"`) })),
  }));
}

// deno-lint-ignore no-explicit-any
type Dashboard = Record<string, any>;

async function dashboard(): Promise<Dashboard> {
  return JSON.parse(await Deno.readTextFile(DASHBOARD_FILE));
}

/** Every panel, rows' nested panels included. */
function panelsOf(d: Dashboard): Dashboard[] {
  return d.panels.flatMap((p: Dashboard) => [p, ...(p.panels ?? [])]);
}

function dashboardExprs(d: Dashboard): string[] {
  return panelsOf(d).flatMap((p) => (p.targets ?? []).map((t: Dashboard) => t.expr as string));
}

function variableQueries(d: Dashboard): string[] {
  return d.templating.list
    .filter((v: Dashboard) => v.type === "query")
    .map((v: Dashboard) => typeof v.query === "string" ? v.query : v.query.query);
}

Deno.test("monitoring: nothing is rendered unless enabled, and each switch renders only its object", async () => {
  const base = kinds(await render(MINIMAL));
  assert.ok(!base.some((k) => /^(ServiceMonitor|PrometheusRule)\//.test(k)), base.join(" "));
  assert.ok(!base.includes(`ConfigMap/${NAME}-dashboard`));
  const added = async (values: string[]) =>
    kinds(await render([...MINIMAL, ...values])).filter((k) => !base.includes(k));
  assert.deepEqual(await added(SM), [`ServiceMonitor/${NAME}`]);
  assert.deepEqual(await added(PR), [`PrometheusRule/${NAME}`]);
  assert.deepEqual(await added(DASH), [`ConfigMap/${NAME}-dashboard`]);
  assert.deepEqual(await added([...SM, ...PR, ...DASH]), [
    `ConfigMap/${NAME}-dashboard`,
    `PrometheusRule/${NAME}`,
    `ServiceMonitor/${NAME}`,
  ]);
});

Deno.test("monitoring: the ServiceMonitor scrapes the Service's metrics port", async () => {
  const ms = await render([
    ...MINIMAL,
    ...SM,
    "--set",
    "monitoring.serviceMonitor.labels.release=kube-prometheus-stack",
  ]);
  const sm = one(ms, "ServiceMonitor");
  const svc = one(ms, "Service");
  assert.equal(sm.apiVersion, "monitoring.coreos.com/v1");
  assert.equal(sm.metadata.namespace, NAMESPACE);
  assert.equal(sm.metadata.labels.release, "kube-prometheus-stack");
  for (const [k, v] of Object.entries(sm.spec.selector.matchLabels)) {
    assert.equal(svc.metadata.labels[k], v, `Service label ${k}`);
  }
  assert.deepEqual(sm.spec.namespaceSelector, { matchNames: [NAMESPACE] });
  assert.deepEqual(sm.spec.endpoints, [
    { port: "metrics", path: "/metrics", scheme: "http", interval: "30s" },
  ]);
  assert.ok(
    svc.spec.ports.some((p: Manifest) => p.name === "metrics" && p.targetPort === "metrics"),
  );
  // No jobLabel: the job is the Service name, which the rules select by default.
  assert.equal(sm.spec.jobLabel, undefined);
  assert.equal(svc.metadata.name, NAME);

  const tuned = one(
    await render([
      ...MINIMAL,
      ...SM,
      "--set",
      "monitoring.serviceMonitor.interval=15s",
      "--set",
      "monitoring.serviceMonitor.scrapeTimeout=10s",
      "--set",
      "monitoring.serviceMonitor.namespace=monitoring",
    ]),
    "ServiceMonitor",
  );
  assert.equal(tuned.metadata.namespace, "monitoring");
  assert.deepEqual(
    tuned.spec.namespaceSelector,
    { matchNames: [NAMESPACE] },
    "still the release's",
  );
  assert.equal(tuned.spec.endpoints[0].interval, "15s");
  assert.equal(tuned.spec.endpoints[0].scrapeTimeout, "10s");
});

Deno.test("monitoring: docs/observability.md shows exactly the chart's rule file", async () => {
  const file = await fileRules();
  assert.deepEqual(await docRules(), file);
  assert.ok(alertNames(file).length >= 12, alertNames(file).join(" "));
  const rule = (name: string) => file.flatMap((g) => g.rules).find((r) => r.alert === name);
  assert.match(
    rule("BigFleetProxmoxMachinesFailed")?.expr ?? "",
    /bigfleet_proxmox_machines\{[^}]*state="FAILED"\}\) > 0$/,
  );
  assert.match(
    rule("BigFleetProxmoxTransitionStuck")?.expr ?? "",
    /time\(\) - \(bigfleet_proxmox_transition_oldest_start_seconds\{[^}]*\} > 0\)\)\s+> on \(instance, state\)\s+bigfleet_proxmox_transition_timeout_seconds\{/,
  );
  // Every series selector carries the job matcher, so a release's rules see only its provider.
  for (const r of file.flatMap((g) => g.rules)) {
    const sels = selectors(r.expr);
    assert.ok(sels.length > 0, r.alert);
    for (const s of sels) {
      assert.ok(
        s.matchers.some((m) => m.label === "job" && m.op === "=" && m.value === "bigfleet-proxmox"),
        `${r.alert}: ${s.metric} has no job="bigfleet-proxmox" matcher`,
      );
    }
  }
});

Deno.test("monitoring: the PrometheusRule renders every documented alert, scoped to the release's job", async () => {
  const documented = await docRules();
  const ms = await render([
    ...MINIMAL,
    ...PR,
    "--set",
    "monitoring.prometheusRule.labels.release=kube-prometheus-stack",
  ]);
  const pr = one(ms, "PrometheusRule");
  assert.equal(pr.apiVersion, "monitoring.coreos.com/v1");
  assert.equal(pr.metadata.namespace, NAMESPACE);
  assert.equal(pr.metadata.labels.release, "kube-prometheus-stack");
  const groups = renderedGroups(ms);
  // Name by name first, for a readable failure; then the whole rule.
  assert.deepEqual(alertNames(groups), alertNames(documented));
  assert.deepEqual(groups, withJob(documented, NAME));
  // The annotation templates reach Prometheus untouched by Helm.
  const down = groups[0].rules.find((r) => r.alert === "BigFleetProxmoxDown");
  assert.equal(
    down?.annotations.summary,
    "Provider {{ $labels.instance }} does not answer scrapes",
  );

  const custom = renderedGroups(
    await render([...MINIMAL, ...PR, "--set", "monitoring.prometheusRule.job=pve-providers"]),
  );
  assert.deepEqual(custom, withJob(documented, "pve-providers"));

  const moved = one(
    await render([...MINIMAL, ...PR, "--set", "monitoring.prometheusRule.namespace=monitoring"]),
    "PrometheusRule",
  );
  assert.equal(moved.metadata.namespace, "monitoring");
});

Deno.test("monitoring: the reconcile-stalled alert is left out when reconcile is off", async () => {
  const all = alertNames(await docRules());
  const stalled = "BigFleetProxmoxReconcileStalled";
  assert.ok(all.includes(stalled));
  for (
    const set of [
      ["--set", "reconcileInterval=0"],
      ["--set-string", "reconcileInterval=0"],
      ["--set", "reconcileInterval=0s"],
      ["--set", "reconcileInterval=0m0.0s"],
    ]
  ) {
    const names = alertNames(renderedGroups(await render([...MINIMAL, ...PR, ...set])));
    assert.deepEqual(names, all.filter((n) => n !== stalled), set.join(" "));
  }
  for (const set of [["--set", "reconcileInterval=30s"], ["--set", "reconcileInterval=10m"]]) {
    const names = alertNames(renderedGroups(await render([...MINIMAL, ...PR, ...set])));
    assert.deepEqual(names, all, set.join(" "));
  }
});

Deno.test("monitoring: the dashboard ConfigMap carries the dashboard JSON for Grafana's sidecar", async () => {
  const text = await Deno.readTextFile(DASHBOARD_FILE);
  let cm = one(await render([...MINIMAL, ...DASH]), "ConfigMap", "-dashboard");
  assert.equal(cm.metadata.namespace, NAMESPACE);
  assert.equal(cm.metadata.labels.grafana_dashboard, "1");
  assert.equal(cm.metadata.annotations, undefined);
  assert.deepEqual(Object.keys(cm.data), ["bigfleet-proxmox.json"]);
  assert.equal(cm.data["bigfleet-proxmox.json"], text.trimEnd());

  cm = one(
    await render([
      ...MINIMAL,
      ...DASH,
      "--set",
      "monitoring.dashboard.namespace=monitoring",
      "--set",
      "monitoring.dashboard.annotations.grafana_folder=BigFleet",
      "--set",
      "monitoring.dashboard.labels.team=fleet",
    ]),
    "ConfigMap",
    "-dashboard",
  );
  assert.equal(cm.metadata.namespace, "monitoring");
  assert.deepEqual(cm.metadata.annotations, { grafana_folder: "BigFleet" });
  assert.equal(cm.metadata.labels.team, "fleet");
  assert.equal(cm.metadata.labels.grafana_dashboard, "1", "values merge with the default label");
});

Deno.test("monitoring: the dashboard shows requests, latency, transitions, API, reconcile and memory", async () => {
  const d = await dashboard();
  assert.equal(d.uid, "bigfleet-proxmox");
  const panels = panelsOf(d);
  const ids = panels.map((p) => p.id);
  assert.equal(new Set(ids).size, ids.length, "panel ids are unique");
  for (const p of panels) {
    assert.ok(p.gridPos.x + p.gridPos.w <= 24, `${p.title} fits the 24-column grid`);
    for (const t of p.targets ?? []) {
      assert.deepEqual(t.datasource, { type: "prometheus", uid: "${datasource}" }, p.title);
      // Every series follows the job and instance pickers.
      for (const s of selectors(t.expr)) {
        const m = new Map(s.matchers.map((x) => [x.label, x.value]));
        assert.equal(m.get("job"), "$job", `${p.title}: ${s.metric}`);
        assert.equal(m.get("instance"), "$instance", `${p.title}: ${s.metric}`);
      }
    }
  }
  const exprs = dashboardExprs(d);
  const uses = (re: RegExp, what: string) =>
    assert.ok(exprs.some((e) => re.test(e)), `a panel shows ${what}`);
  uses(/by \(method\) \(rate\(bigfleet_proxmox_grpc_requests_total\{/, "request rate per method");
  uses(
    /by \(method, le\) \(rate\(bigfleet_proxmox_grpc_request_duration_seconds_bucket/,
    "latency per method",
  );
  uses(/method=~"Create\|Configure\|Drain\|Delete", code="OK"/, "transitions started");
  uses(
    /by \(op\) \(increase\(bigfleet_proxmox_api_calls_total\{[^}]*outcome="error"/,
    "failures per op",
  );
  uses(/by \(op, le\) \(rate\(bigfleet_proxmox_api_duration_seconds_bucket/, "API latency per op");
  uses(/bigfleet_proxmox_reconcile_total/, "reconcile passes");
  uses(/process_resident_memory_bytes/, "process memory");
  uses(/^sum by \(state\) \(bigfleet_proxmox_machines\{/, "machines by state");
  uses(
    /^sum by \(zone\) \(bigfleet_proxmox_machines\{[^}]*state="FAILED"/,
    "FAILED machines by zone",
  );
  uses(
    /time\(\) - \(bigfleet_proxmox_transition_oldest_start_seconds\{/,
    "the oldest transition's age",
  );
});

/** Metric names and label keys a real provider exports, after some real RPCs. */
async function exportedSeries(): Promise<Map<string, Set<string>>> {
  const proc = await startWithMetrics(["--seed-count=4", "--provider=monitoring"]);
  const h = new Harness(proc.addr);
  try {
    // grpc_* series appear with the first call of each method/code.
    await h.list();
    const missing = await outcome(h.get("monitoring/no/such/machine"));
    assert.equal(missing.code, grpcStatus.NOT_FOUND);
    const res = await httpGet(proc.metricsPort, "/metrics");
    assert.equal(res.status, 200);
    const series = new Map<string, Set<string>>();
    for (const line of res.body.split("\n")) {
      if (line === "" || line.startsWith("#")) continue;
      const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? \S+$/);
      assert.ok(m, `parsable line: ${line}`);
      const labels = series.get(m[1]) ?? new Set<string>();
      for (const l of (m[2] ?? "").matchAll(/(\w+)="/g)) labels.add(l[1]);
      series.set(m[1], labels);
    }
    return series;
  } finally {
    h.close();
    await proc.stop();
  }
}

// Labels Prometheus adds to every scraped series; `up` is its own series per target.
const TARGET_LABELS = ["job", "instance"];
const SYNTHETIC: Record<string, string[]> = { up: [] };
// Label values with a closed domain (docs/observability.md § Metrics).
const DOMAINS: Record<string, readonly string[]> = {
  op: API_OPS,
  outcome: ["ok", "error"],
  method: ["Create", "Configure", "Drain", "Delete", "Get", "List"],
  code: Object.keys(grpcStatus).filter((k) => Number.isNaN(Number(k))),
  state: Object.values(STATE_NAMES),
};

Deno.test("monitoring: every metric, label and label value in the rules and dashboard is one the provider exports", async () => {
  const d = await dashboard();
  const used: [string, Selector][] = [
    ...(await fileRules()).flatMap((g) =>
      g.rules.flatMap((r) =>
        selectors(r.expr).map((s): [string, Selector] => [`rule ${r.alert}`, s])
      )
    ),
    ...dashboardExprs(d).flatMap((e) =>
      selectors(e).map((s): [string, Selector] => [`dashboard: ${e}`, s])
    ),
    ...variableQueries(d).flatMap((q) =>
      variableSelectors(q).map((s): [string, Selector] => [`dashboard variable: ${q}`, s])
    ),
  ];
  // The reader found what the files hold, so the checks below are not vacuous.
  const metrics = new Set(used.map(([, s]) => s.metric));
  for (
    const name of [
      "up",
      "bigfleet_proxmox_grpc_requests_total",
      "bigfleet_proxmox_grpc_request_duration_seconds_bucket",
      "bigfleet_proxmox_api_calls_total",
      "bigfleet_proxmox_api_duration_seconds_bucket",
      "bigfleet_proxmox_reconcile_total",
      "bigfleet_proxmox_panics_total",
      "bigfleet_proxmox_machines",
      "bigfleet_proxmox_transition_oldest_start_seconds",
      "bigfleet_proxmox_transition_timeout_seconds",
      "process_resident_memory_bytes",
    ]
  ) assert.ok(metrics.has(name), `${name} is used`);

  const exported = await exportedSeries();
  for (const [where, s] of used) {
    const labels = exported.get(s.metric) ?? (SYNTHETIC[s.metric] && new Set(SYNTHETIC[s.metric]));
    assert.ok(labels, `${where}: ${s.metric} is not on the provider's /metrics`);
    for (const m of s.matchers) {
      assert.ok(
        labels.has(m.label) || TARGET_LABELS.includes(m.label),
        `${where}: ${s.metric} has no label ${m.label}`,
      );
      const domain = DOMAINS[m.label];
      if (!domain || m.value.startsWith("$")) continue;
      const values = m.op.endsWith("~") ? m.value.split("|") : [m.value];
      for (const v of values) {
        assert.ok(domain.includes(v), `${where}: ${m.label}="${v}" is never exported`);
      }
    }
  }
});
