// The Helm chart, rendered with a real `helm template` for each example values
// file: flags, volumes, probes, hardening, strategy, ports, annotations, the
// render-time validation, and that the program's own config loader accepts
// exactly what the chart passes it.

import assert from "node:assert/strict";
import { loadConfig } from "../../src/config/load.ts";
import { FLAG_TABLE } from "../../src/config/flags.ts";
import {
  EXAMPLES,
  helm,
  kinds,
  type Manifest,
  one,
  parseManifests,
  RELEASE,
  render,
  ROOT,
  template,
} from "./helm_helpers.ts";

const MINIMAL = ["-f", `${EXAMPLES}/values-minimal.yaml`];
const FULL = ["-f", `${EXAMPLES}/values-full.yaml`];
const MTLS = ["-f", `${EXAMPLES}/values-mtls.yaml`];
const FAKE = ["--set", "useFakeBackend=true"];
const WITH_FILES = [
  "--set-file",
  `offerings.content=${EXAMPLES}/offerings.example.json`,
  "--set-file",
  `instanceTypes.content=${EXAMPLES}/instance-types.example.json`,
];
// The release name contains the chart name, so it is the resource name as is.
const NAME = RELEASE;

function deployment(ms: Manifest[]): Manifest {
  return one(ms, "Deployment");
}
function podSpec(ms: Manifest[]): Manifest {
  return deployment(ms).spec.template.spec;
}
function container(ms: Manifest[]): Manifest {
  const cs = podSpec(ms).containers;
  assert.equal(cs.length, 1, "one container");
  return cs[0];
}
function args(ms: Manifest[]): string[] {
  return container(ms).args;
}
function volume(ms: Manifest[], name: string): Manifest | undefined {
  return podSpec(ms).volumes.find((v: Manifest) => v.name === name);
}
function mount(ms: Manifest[], name: string): Manifest | undefined {
  return container(ms).volumeMounts.find((m: Manifest) => m.name === name);
}
function flagNames(argv: string[]): string[] {
  return argv.map((a) => a.replace(/^--?/, "").split("=")[0]);
}

// Structurally valid PEM: the loader checks structure, not cryptography.
const FAKE_CERT = "-----BEGIN CERTIFICATE-----\nQUJDREVGR0g=\n-----END CERTIFICATE-----\n";
const FAKE_KEY = "-----BEGIN PRIVATE KEY-----\nQUJDREVGR0g=\n-----END PRIVATE KEY-----\n";
const FAKE_TOKEN = "00000000-0000-0000-0000-000000000000";

/**
 * The files the container would see, built from the rendered mounts: ConfigMap
 * data verbatim, Secret items as placeholder token/PEM text. A flag pointing at
 * a path no mount provides makes the loader fail with "cannot read".
 */
function podFiles(ms: Manifest[]): Map<string, string> {
  const files = new Map<string, string>();
  for (const m of container(ms).volumeMounts as Manifest[]) {
    const v = volume(ms, m.name);
    assert.ok(v, `mount ${m.name} has a volume`);
    if (v.configMap) {
      const cm = ms.find((x) => x.kind === "ConfigMap" && x.metadata.name === v.configMap.name);
      assert.ok(cm, `ConfigMap ${v.configMap.name} is rendered`);
      for (const [k, text] of Object.entries(cm.data)) {
        files.set(`${m.mountPath}/${k}`, String(text));
      }
    } else if (v.secret) {
      for (const item of v.secret.items as Manifest[]) {
        const path = `${m.mountPath}/${item.path}`;
        const text = m.mountPath.endsWith("proxmox-token")
          ? FAKE_TOKEN
          : item.path.endsWith(".key")
          ? FAKE_KEY
          : FAKE_CERT;
        files.set(path, text);
      }
    }
  }
  return files;
}

function loadRendered(ms: Manifest[]) {
  const files = podFiles(ms);
  return loadConfig(args(ms), {
    readFile: (path) => {
      const text = files.get(path);
      return text === undefined
        ? Promise.reject(new Deno.errors.NotFound(`no such file in the pod: ${path}`))
        : Promise.resolve(text);
    },
  });
}

Deno.test("chart: minimal values render a single-replica Recreate Deployment with the exact flags", async () => {
  const ms = await render(MINIMAL);
  assert.deepEqual(kinds(ms), [
    `Deployment/${NAME}`,
    `PersistentVolumeClaim/${NAME}-state`,
    `Service/${NAME}`,
    `ServiceAccount/${NAME}`,
  ]);
  const d = deployment(ms);
  assert.equal(d.metadata.namespace, "bigfleet");
  assert.equal(d.spec.replicas, 1);
  assert.deepEqual(d.spec.strategy, { type: "Recreate" });
  assert.equal(container(ms).image, "ghcr.io/your-org/bigfleet-proxmox:latest");
  assert.equal(container(ms).imagePullPolicy, "IfNotPresent");
  assert.deepEqual(args(ms), [
    "--addr=:9000",
    "--metrics-addr=:9090",
    "--provider=proxmox-dc1",
    "--proxmox-backend=proxmox",
    "--proxmox-api-url=https://pve1.example.internal:8006/api2/json",
    "--proxmox-token-id=bigfleet@pve!autoscaler",
    "--proxmox-token-file=/etc/bigfleet/proxmox-token/token",
    "--proxmox-ca-file=/etc/bigfleet/proxmox-ca/ca.pem",
    "--proxmox-pool=bigfleet",
    "--nodes=pve1,pve2,pve3",
    "--template-vmid=9000",
    "--state=/var/lib/bigfleet/state.kv",
  ]);
  // Selector labels are what the Service routes on.
  assert.deepEqual(d.spec.selector.matchLabels, {
    "app.kubernetes.io/name": "bigfleet-proxmox",
    "app.kubernetes.io/instance": RELEASE,
  });
});

Deno.test("chart: every rendered flag is one the program knows", async () => {
  for (const values of [MINIMAL, FULL, MTLS, FAKE, [...MINIMAL, ...WITH_FILES]]) {
    for (const name of flagNames(args(await render(values)))) {
      assert.ok(Object.hasOwn(FLAG_TABLE, name), `--${name} (values ${values.join(" ")})`);
    }
  }
});

Deno.test("chart: pod runs non-root, read-only, no privileges, RuntimeDefault seccomp", async () => {
  const ms = await render(MINIMAL);
  const pod = podSpec(ms);
  assert.deepEqual(pod.securityContext, {
    runAsNonRoot: true,
    runAsUser: 65532,
    runAsGroup: 65532,
    fsGroup: 65532,
    seccompProfile: { type: "RuntimeDefault" },
  });
  assert.deepEqual(container(ms).securityContext, {
    runAsNonRoot: true,
    runAsUser: 65532,
    runAsGroup: 65532,
    readOnlyRootFilesystem: true,
    allowPrivilegeEscalation: false,
    capabilities: { drop: ["ALL"] },
    seccompProfile: { type: "RuntimeDefault" },
  });
  assert.equal(pod.automountServiceAccountToken, false);
  assert.equal(pod.serviceAccountName, NAME);
  assert.equal(one(ms, "ServiceAccount").automountServiceAccountToken, false);
  // Writable /tmp on an otherwise read-only root.
  assert.ok(volume(ms, "tmp")?.emptyDir);
  assert.equal(mount(ms, "tmp")?.mountPath, "/tmp");
  assert.deepEqual(container(ms).env[0], { name: "TMPDIR", value: "/tmp" });
});

Deno.test("chart: grpc/metrics ports, /healthz and /readyz probes, Service with scrape annotations", async () => {
  const ms = await render(MINIMAL);
  const c = container(ms);
  assert.deepEqual(c.ports, [
    { name: "grpc", containerPort: 9000, protocol: "TCP" },
    { name: "metrics", containerPort: 9090, protocol: "TCP" },
  ]);
  assert.deepEqual(c.livenessProbe.httpGet, { path: "/healthz", port: "metrics" });
  assert.deepEqual(c.readinessProbe.httpGet, { path: "/readyz", port: "metrics" });
  const svc = one(ms, "Service");
  assert.equal(svc.spec.type, "ClusterIP");
  assert.deepEqual(
    svc.spec.ports.map((p: Manifest) => [p.name, p.port, p.targetPort, p.appProtocol]),
    [["grpc", 9000, "grpc", "grpc"], ["metrics", 9090, "metrics", "http"]],
  );
  assert.deepEqual(svc.metadata.annotations, {
    "prometheus.io/scrape": "true",
    "prometheus.io/port": "9090",
    "prometheus.io/path": "/metrics",
  });
  // The Service selects the Deployment's pods.
  const podLabels = deployment(ms).spec.template.metadata.labels;
  for (const [k, v] of Object.entries(svc.spec.selector)) assert.equal(podLabels[k], v, k);
});

Deno.test("chart: token and CA Secrets are mounted read-only under fixed file names", async () => {
  const ms = await render(MINIMAL);
  assert.deepEqual(volume(ms, "proxmox-token")?.secret, {
    secretName: "bigfleet-proxmox-token",
    items: [{ key: "token", path: "token" }],
    defaultMode: 0o440,
  });
  assert.deepEqual(mount(ms, "proxmox-token"), {
    name: "proxmox-token",
    mountPath: "/etc/bigfleet/proxmox-token",
    readOnly: true,
  });
  assert.deepEqual(volume(ms, "proxmox-ca")?.secret, {
    secretName: "bigfleet-proxmox-ca",
    items: [{ key: "ca.pem", path: "ca.pem" }],
    defaultMode: 0o444,
  });
  assert.deepEqual(mount(ms, "proxmox-ca"), {
    name: "proxmox-ca",
    mountPath: "/etc/bigfleet/proxmox-ca",
    readOnly: true,
  });
  // The secret itself never appears in the manifests.
  assert.ok(!args(ms).some((a) => a.startsWith("--proxmox-token-secret")));
});

Deno.test("chart: durable state on a kept PVC, an emptyDir, an existing claim, or off", async () => {
  let ms = await render(MINIMAL);
  const pvc = one(ms, "PersistentVolumeClaim");
  assert.equal(pvc.metadata.name, `${NAME}-state`);
  assert.equal(pvc.metadata.annotations["helm.sh/resource-policy"], "keep");
  assert.deepEqual(pvc.spec.accessModes, ["ReadWriteOnce"]);
  assert.equal(pvc.spec.resources.requests.storage, "1Gi");
  assert.equal(pvc.spec.storageClassName, undefined, "default StorageClass");
  assert.deepEqual(volume(ms, "state")?.persistentVolumeClaim, { claimName: `${NAME}-state` });
  assert.deepEqual(mount(ms, "state"), { name: "state", mountPath: "/var/lib/bigfleet" });

  ms = await render([...MINIMAL, "--set", "state.persistence.storageClass=-"]);
  assert.equal(one(ms, "PersistentVolumeClaim").spec.storageClassName, "");

  ms = await render([...MINIMAL, "--set", "state.persistence.enabled=false"]);
  assert.ok(!ms.some((m) => m.kind === "PersistentVolumeClaim"));
  assert.deepEqual(volume(ms, "state")?.emptyDir, {});
  assert.ok(args(ms).includes("--state=/var/lib/bigfleet/state.kv"));

  ms = await render([...MINIMAL, "--set", "state.persistence.existingClaim=pre-made"]);
  assert.ok(!ms.some((m) => m.kind === "PersistentVolumeClaim"));
  assert.deepEqual(volume(ms, "state")?.persistentVolumeClaim, { claimName: "pre-made" });

  ms = await render([...MINIMAL, "--set", "state.enabled=false"]);
  assert.ok(!ms.some((m) => m.kind === "PersistentVolumeClaim"));
  assert.equal(volume(ms, "state"), undefined);
  assert.equal(mount(ms, "state"), undefined);
  assert.ok(!args(ms).some((a) => a.startsWith("--state")));
});

Deno.test("chart: offerings and instance types from --set-file become mounted ConfigMaps with checksums", async () => {
  const ms = await render([...MINIMAL, ...WITH_FILES]);
  const offeringsText = await Deno.readTextFile(`${EXAMPLES}/offerings.example.json`);
  const typesText = await Deno.readTextFile(`${EXAMPLES}/instance-types.example.json`);
  const offerings = one(ms, "ConfigMap", "-offerings");
  const types = one(ms, "ConfigMap", "-instance-types");
  assert.equal(offerings.metadata.name, `${NAME}-offerings`);
  assert.equal(offerings.data["offerings.json"], offeringsText.trimEnd());
  assert.equal(types.data["instance-types.json"], typesText.trimEnd());
  assert.deepEqual(JSON.parse(offerings.data["offerings.json"]), JSON.parse(offeringsText));

  const a = args(ms);
  assert.ok(a.includes("--offerings=/etc/bigfleet/offerings/offerings.json"));
  assert.ok(a.includes("--instance-types=/etc/bigfleet/instance-types/instance-types.json"));
  assert.deepEqual(volume(ms, "offerings")?.configMap, { name: `${NAME}-offerings` });
  assert.deepEqual(volume(ms, "instance-types")?.configMap, { name: `${NAME}-instance-types` });
  assert.deepEqual(mount(ms, "offerings"), {
    name: "offerings",
    mountPath: "/etc/bigfleet/offerings",
    readOnly: true,
  });
  assert.equal(mount(ms, "instance-types")?.mountPath, "/etc/bigfleet/instance-types");

  // The pod template changes (and the pod rolls) exactly when the content does.
  const ann = deployment(ms).spec.template.metadata.annotations;
  assert.match(ann["checksum/offerings"], /^[0-9a-f]{64}$/);
  assert.match(ann["checksum/instance-types"], /^[0-9a-f]{64}$/);
  const again = deployment(await render([...MINIMAL, ...WITH_FILES])).spec.template.metadata;
  assert.deepEqual(again.annotations, ann, "stable across renders");
  const changed = await Deno.makeTempFile({ suffix: ".json" });
  try {
    await Deno.writeTextFile(changed, offeringsText.replace('"count": 8', '"count": 7'));
    const ms2 = await render([
      ...MINIMAL,
      ...WITH_FILES,
      "--set-file",
      `offerings.content=${changed}`,
    ]);
    const ann2 = deployment(ms2).spec.template.metadata.annotations;
    assert.notEqual(ann2["checksum/offerings"], ann["checksum/offerings"]);
    assert.equal(ann2["checksum/instance-types"], ann["checksum/instance-types"]);
  } finally {
    await Deno.remove(changed);
  }

  // Without content: no ConfigMap, no flag, no annotation (built-in catalog).
  const bare = await render(MINIMAL);
  assert.ok(!bare.some((m) => m.kind === "ConfigMap"));
  assert.ok(
    !args(bare).some((x) => x.startsWith("--offerings") || x.startsWith("--instance-types")),
  );
  assert.equal(deployment(bare).spec.template.metadata.annotations, undefined);
});

Deno.test("chart: full values set every knob", async () => {
  const ms = await render(FULL);
  assert.deepEqual(args(ms), [
    "--addr=:9000",
    "--metrics-addr=:9090",
    "--provider=proxmox-dc3",
    "--proxmox-backend=proxmox",
    "--proxmox-api-url=https://pve.dc3.example.internal:8006/api2/json",
    "--proxmox-token-id=bigfleet@pve!dc3",
    "--proxmox-token-file=/etc/bigfleet/proxmox-token/token",
    "--proxmox-ca-file=/etc/bigfleet/proxmox-ca/ca.pem",
    "--proxmox-tls-fingerprint=" +
    "12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0:12:34:56:78:9A:BC:DE:F0",
    "--proxmox-pool=bigfleet-dc3",
    "--nodes=pve-1,pve-2",
    "--template-vmid=9100",
    "--state=/var/lib/bigfleet/state.kv",
    "--offerings=/etc/bigfleet/offerings/offerings.json",
    "--instance-types=/etc/bigfleet/instance-types/instance-types.json",
    "--tls-cert=/etc/bigfleet/tls/tls.crt",
    "--tls-key=/etc/bigfleet/tls/tls.key",
    // extraArgs last, so they can override a generated flag.
    "--reconcile-interval=5m",
    "--price-per-vcpu-hour=0.004",
  ]);
  const c = container(ms);
  const pod = podSpec(ms);
  const tmpl = deployment(ms).spec.template;
  assert.equal(c.image, "registry.example.internal/bigfleet/bigfleet-proxmox:1.2.3");
  assert.equal(c.imagePullPolicy, "Always");
  assert.deepEqual(pod.imagePullSecrets, [{ name: "registry-credentials" }]);
  assert.deepEqual(c.resources, {
    requests: { cpu: "200m", memory: "256Mi" },
    limits: { memory: "1Gi" },
  });
  assert.deepEqual(pod.nodeSelector, { "kubernetes.io/os": "linux" });
  assert.deepEqual(pod.tolerations, [
    { key: "dedicated", operator: "Equal", value: "control", effect: "NoSchedule" },
  ]);
  assert.equal(
    pod.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]
      .matchExpressions[0].key,
    "node-role.kubernetes.io/control-plane",
  );
  assert.equal(tmpl.metadata.annotations["example.com/owner"], "platform");
  assert.match(tmpl.metadata.annotations["checksum/offerings"], /^[0-9a-f]{64}$/);
  assert.equal(tmpl.metadata.labels.team, "platform");
  assert.equal(pod.serviceAccountName, "bigfleet-proxmox-dc3");
  assert.equal(one(ms, "ServiceAccount").metadata.name, "bigfleet-proxmox-dc3");
  assert.deepEqual(c.env, [{ name: "TMPDIR", value: "/tmp" }, { name: "TZ", value: "UTC" }]);
  // A custom Secret key still lands at the fixed path the flag names.
  assert.deepEqual(volume(ms, "proxmox-token")?.secret.items, [{ key: "secret", path: "token" }]);
  assert.deepEqual(volume(ms, "proxmox-ca")?.secret.items, [
    { key: "pve-root-ca.pem", path: "ca.pem" },
  ]);
  // Server TLS without client verification: no ca.crt.
  assert.deepEqual(volume(ms, "tls")?.secret, {
    secretName: "dc3-provider-tls",
    items: [{ key: "tls.crt", path: "tls.crt" }, { key: "tls.key", path: "tls.key" }],
    defaultMode: 0o440,
  });
  const pvc = one(ms, "PersistentVolumeClaim");
  assert.equal(pvc.spec.storageClassName, "fast-ssd");
  assert.equal(pvc.spec.resources.requests.storage, "2Gi");
  const svc = one(ms, "Service");
  assert.equal(svc.metadata.annotations["example.com/team"], "fleet");
  assert.equal(svc.metadata.annotations["prometheus.io/scrape"], "true");
});

Deno.test("chart: mTLS values mount ca.crt and pass --tls-ca; a fingerprint alone is trust enough", async () => {
  const ms = await render(MTLS);
  assert.deepEqual(args(ms), [
    "--addr=:9000",
    "--metrics-addr=:9090",
    "--provider=proxmox-dc2",
    "--proxmox-backend=proxmox",
    "--proxmox-api-url=https://pve.dc2.example.internal:8006/api2/json",
    "--proxmox-token-id=bigfleet@pve!autoscaler",
    "--proxmox-token-file=/etc/bigfleet/proxmox-token/token",
    "--proxmox-tls-fingerprint=" +
    "AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89",
    "--proxmox-pool=bigfleet",
    // proxmox.nodes given as a YAML list.
    "--nodes=pve-a,pve-b",
    "--template-vmid=9000",
    "--state=/var/lib/bigfleet/state.kv",
    "--tls-cert=/etc/bigfleet/tls/tls.crt",
    "--tls-key=/etc/bigfleet/tls/tls.key",
    "--tls-ca=/etc/bigfleet/tls/ca.crt",
  ]);
  assert.deepEqual(volume(ms, "tls")?.secret, {
    secretName: "bigfleet-proxmox-tls",
    items: [
      { key: "tls.crt", path: "tls.crt" },
      { key: "tls.key", path: "tls.key" },
      { key: "ca.crt", path: "ca.crt" },
    ],
    defaultMode: 0o440,
  });
  assert.deepEqual(mount(ms, "tls"), {
    name: "tls",
    mountPath: "/etc/bigfleet/tls",
    readOnly: true,
  });
  assert.equal(volume(ms, "proxmox-ca"), undefined, "no CA Secret configured");
  assert.equal(mount(ms, "proxmox-ca"), undefined);
});

Deno.test("chart: the fake backend renders without any Proxmox settings or credentials", async () => {
  const ms = await render(FAKE);
  assert.deepEqual(args(ms), [
    "--addr=:9000",
    "--metrics-addr=:9090",
    "--provider=proxmox",
    "--use-fake-backend",
    "--state=/var/lib/bigfleet/state.kv",
  ]);
  assert.equal(volume(ms, "proxmox-token"), undefined);
  assert.equal(volume(ms, "proxmox-ca"), undefined);
  // Off by default: a plain install is the real backend.
  const values = await Deno.readTextFile(`${ROOT}deploy/helm/values.yaml`);
  assert.match(values, /^useFakeBackend: false$/m);
});

Deno.test("chart: the program's config loader accepts what each example renders", async () => {
  const minimal = await loadRendered(await render([...MINIMAL, ...WITH_FILES]));
  assert.equal(minimal.backend, "proxmox");
  assert.equal(minimal.provider, "proxmox-dc1");
  assert.deepEqual(minimal.proxmox?.nodes, ["pve1", "pve2", "pve3"]);
  assert.equal(minimal.proxmox?.tokenSecret, FAKE_TOKEN);
  assert.equal(minimal.proxmox?.caPem, FAKE_CERT);
  assert.equal(minimal.proxmox?.pool, "bigfleet");
  assert.deepEqual(minimal.template, { kind: "vmid", vmid: 9000 });
  assert.equal(minimal.statePath, "/var/lib/bigfleet/state.kv");
  assert.equal(minimal.offeringsSource, "/etc/bigfleet/offerings/offerings.json");
  assert.ok(minimal.catalog.has("pve.large"));
  assert.equal(minimal.tls, null);

  const full = await loadRendered(await render(FULL));
  assert.equal(full.proxmox?.caPem, FAKE_CERT);
  assert.match(full.proxmox?.fingerprint ?? "", /^12:34:56/);
  assert.equal(full.reconcileIntervalMs, 5 * 60_000);
  assert.ok(full.tls && full.tls.caPem === null, "TLS without client verification");

  const mtls = await loadRendered(await render(MTLS));
  assert.equal(mtls.proxmox?.caPem, null);
  assert.ok(mtls.tls?.caPem, "mTLS");

  const fake = await loadRendered(await render(FAKE));
  assert.equal(fake.backend, "fake");
  assert.equal(fake.proxmox, null);
});

Deno.test("chart: a real-backend install without TLS trust material fails with a clear message", async () => {
  const res = await template([...MINIMAL, "--set", "credentials.ca.secretName="]);
  assert.equal(res.ok, false, "must not render");
  assert.equal(res.stdout, "");
  assert.match(res.stderr, /bigfleet-proxmox: no TLS trust material for the Proxmox API/);
  assert.match(res.stderr, /credentials\.ca\.secretName/);
  assert.match(res.stderr, /proxmox\.tlsFingerprint/);
  assert.match(res.stderr, /no skip-verify option/);
  // Either kind of trust material is enough; the fake backend needs none.
  assert.ok(
    (await template([
      ...MINIMAL,
      "--set",
      "credentials.ca.secretName=",
      "--set",
      "proxmox.tlsFingerprint=AB:CD",
    ])).ok,
  );
  assert.ok((await template([...MINIMAL, "--set", "credentials.ca.secretName=", ...FAKE])).ok);
});

Deno.test("chart: other incomplete installs fail at render time, naming the value", async () => {
  const cases: [string[], RegExp][] = [
    [[], /proxmox\.apiURL is required for the real Proxmox backend/],
    [
      [...MINIMAL, "--set", "proxmox.apiURL=http://pve:8006/api2/json"],
      /must be an https:\/\/ URL/,
    ],
    [
      [...MINIMAL, "--set", "proxmox.tokenID="],
      /proxmox\.tokenID \(USER@REALM!TOKENID\) is required/,
    ],
    [[...MINIMAL, "--set", "proxmox.nodes="], /proxmox\.nodes .* is required/],
    [
      [...MINIMAL, "--set", "credentials.token.secretName="],
      /credentials\.token\.secretName .* is required/,
    ],
    [[...MINIMAL, "--set", "tls.enabled=true"], /tls\.enabled=true needs tls\.secretName/],
    [[...MINIMAL, "--set", "tls.mtls=true"], /tls\.mtls=true needs tls\.enabled=true/],
  ];
  for (const [values, message] of cases) {
    const res = await template(values);
    assert.equal(res.ok, false, `${values.join(" ")} must not render`);
    assert.match(res.stderr, message, values.join(" "));
    assert.match(res.stderr, /bigfleet-proxmox: /);
  }
});

Deno.test("chart: a large templateVMID renders as an integer, not a float", async () => {
  const ms = await render([...MINIMAL, "--set", "proxmox.templateVMID=100000000"]);
  assert.ok(args(ms).includes("--template-vmid=100000000"), args(ms).join(" "));
  const none = await render([...MINIMAL, "--set", "proxmox.templateVMID="]);
  assert.ok(!args(none).some((a) => a.startsWith("--template-vmid")));
});

Deno.test("chart: helm lint --strict passes with each example values file", async () => {
  for (const values of [MINIMAL, FULL, MTLS, FAKE]) {
    const res = await helm(["lint", "--strict", `${ROOT}deploy/helm`, ...values]);
    assert.ok(res.ok, `helm lint ${values.join(" ")}:\n${res.stdout}${res.stderr}`);
  }
});

Deno.test("examples: Secrets and JSON files match what the values reference", async () => {
  const token = parseManifests(await Deno.readTextFile(`${EXAMPLES}/secret-token.yaml`));
  const ca = parseManifests(await Deno.readTextFile(`${EXAMPLES}/secret-ca.yaml`));
  const deploy = await render(MINIMAL);
  const tokenVol = volume(deploy, "proxmox-token")?.secret;
  const caVol = volume(deploy, "proxmox-ca")?.secret;
  assert.equal(token[0].kind, "Secret");
  assert.equal(token[0].metadata.name, tokenVol.secretName);
  assert.ok(Object.hasOwn(token[0].stringData, tokenVol.items[0].key));
  assert.equal(ca[0].metadata.name, caVol.secretName);
  assert.ok(Object.hasOwn(ca[0].stringData, caVol.items[0].key));
  // Placeholders only: nothing that looks like a real token secret.
  assert.equal(token[0].stringData.token, FAKE_TOKEN);

  const offerings = JSON.parse(await Deno.readTextFile(`${EXAMPLES}/offerings.example.json`));
  const types = JSON.parse(await Deno.readTextFile(`${EXAMPLES}/instance-types.example.json`));
  assert.ok(Array.isArray(offerings) && offerings.length > 0);
  for (const o of offerings) assert.ok(Object.hasOwn(types, o.instance_type), o.instance_type);
});
