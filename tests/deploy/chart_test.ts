// The Helm chart, rendered with a real `helm template` for each example values
// file: flags, volumes, probes, hardening, strategy, ports, annotations, the
// render-time validation, and that the program's own config loader accepts
// exactly what the chart passes it.

import assert from "node:assert/strict";
import { loadConfig } from "../../src/config/load.ts";
import { FLAG_TABLE } from "../../src/config/flags.ts";
import {
  CHART,
  EXAMPLES,
  helm,
  kinds,
  type Manifest,
  NAMESPACE,
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

interface PodView {
  spec: Manifest;
  container: Manifest;
}

function deploymentPod(ms: Manifest[]): PodView {
  return { spec: podSpec(ms), container: container(ms) };
}

/** The `helm test` Pod. */
function preflightPod(ms: Manifest[]): PodView {
  const spec = one(ms, "Pod", "-preflight").spec;
  assert.equal(spec.containers.length, 1, "one container");
  return { spec, container: spec.containers[0] };
}

/**
 * The files a container would see, built from its rendered mounts: ConfigMap
 * data verbatim, Secret items as placeholder token/PEM text. A flag pointing at
 * a path no mount provides makes the loader fail with "cannot read".
 */
function podFiles(ms: Manifest[], pod: PodView): Map<string, string> {
  const files = new Map<string, string>();
  for (const m of pod.container.volumeMounts as Manifest[]) {
    const v = pod.spec.volumes.find((x: Manifest) => x.name === m.name);
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

/** The program's config loader on `argv`, seeing only the files `pod` mounts. */
function loadInPod(ms: Manifest[], pod: PodView, argv: string[]) {
  const files = podFiles(ms, pod);
  return loadConfig(argv, {
    readFile: (path) => {
      const text = files.get(path);
      return text === undefined
        ? Promise.reject(new Deno.errors.NotFound(`no such file in the pod: ${path}`))
        : Promise.resolve(text);
    },
  });
}

function loadRendered(ms: Manifest[]) {
  return loadInPod(ms, deploymentPod(ms), args(ms));
}

Deno.test("chart: minimal values render a single-replica Recreate Deployment with the exact flags", async () => {
  const ms = await render(MINIMAL);
  assert.deepEqual(kinds(ms), [
    `Deployment/${NAME}`,
    `PersistentVolumeClaim/${NAME}-state`,
    `Pod/${NAME}-preflight`,
    `Service/${NAME}`,
    `ServiceAccount/${NAME}`,
  ]);
  const d = deployment(ms);
  assert.equal(d.metadata.namespace, "bigfleet");
  assert.equal(d.spec.replicas, 1);
  assert.deepEqual(d.spec.strategy, { type: "Recreate" });
  assert.equal(container(ms).image, "ghcr.io/your-org/bigfleet-proxmox:0.1.0");
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
    "--shutdown-timeout=960s",
  ]);
  // Selector labels are what the Service routes on.
  assert.deepEqual(d.spec.selector.matchLabels, {
    "app.kubernetes.io/name": "bigfleet-proxmox",
    "app.kubernetes.io/instance": RELEASE,
  });
});

Deno.test("chart: every rendered flag is one the program knows", async () => {
  for (const values of [MINIMAL, FULL, MTLS, FAKE, [...MINIMAL, ...WITH_FILES]]) {
    const ms = await render(values);
    const argvs = [args(ms)];
    if (!values.includes("useFakeBackend=true")) {
      argvs.push(preflightPod(ms).container.args.slice(1));
    }
    for (const argv of argvs) {
      for (const name of flagNames(argv)) {
        assert.ok(Object.hasOwn(FLAG_TABLE, name), `--${name} (values ${values.join(" ")})`);
      }
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
    "--proxmox-memory-overcommit=1.0",
    "--proxmox-memory-reserve=2GiB,pve-2=8GiB",
    "--proxmox-cpu-overcommit=4",
    "--template-vmid=9100",
    "--state=/var/lib/bigfleet/state.kv",
    "--offerings=/etc/bigfleet/offerings/offerings.json",
    "--instance-types=/etc/bigfleet/instance-types/instance-types.json",
    "--prices=pve.large=0.05",
    "--price-per-vcpu-hour=0.004",
    // A float from a values file prints in plain decimal, not 7.5e-04.
    "--price-per-gib-hour=0.00075",
    "--bootstrap-path=/run/bigfleet/bootstrap.sh",
    "--bootstrap-exec=/bin/bash,-eu",
    "--reconcile-interval=5m",
    "--reflection=false",
    "--shutdown-timeout=960s",
    "--tls-cert=/etc/bigfleet/tls/tls.crt",
    "--tls-key=/etc/bigfleet/tls/tls.key",
  ]);
  const c = container(ms);
  const pod = podSpec(ms);
  const tmpl = deployment(ms).spec.template;
  assert.equal(c.image, "registry.example.internal/bigfleet/bigfleet-proxmox:0.1.0");
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
  assert.deepEqual(c.env, [
    { name: "TMPDIR", value: "/tmp" },
    // The admin socket beside the state file, for kubectl exec (docs/security.md#the-admin-socket).
    { name: "BIGFLEET_ADMIN_SOCKET", value: "/var/lib/bigfleet/state.kv.admin" },
    { name: "TZ", value: "UTC" },
  ]);
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

Deno.test("chart: terminationGracePeriodSeconds follows shutdownTimeoutSeconds and stays above it", async () => {
  const grace = (ms: Manifest[]) => podSpec(ms).terminationGracePeriodSeconds;
  const byDefault = await render(MINIMAL);
  assert.ok(args(byDefault).includes("--shutdown-timeout=960s"));
  assert.equal(grace(byDefault), 990);
  const shorter = await render([...MINIMAL, "--set", "shutdownTimeoutSeconds=120"]);
  assert.ok(args(shorter).includes("--shutdown-timeout=120s"));
  assert.equal(grace(shorter), 150);
  const explicit = await render([...MINIMAL, "--set", "terminationGracePeriodSeconds=1200"]);
  assert.equal(grace(explicit), 1200);
  const loaded = await loadRendered(shorter);
  assert.equal(loaded.shutdownTimeoutMs, 120_000);
  await assert.rejects(
    render([...MINIMAL, "--set", "terminationGracePeriodSeconds=60"]),
    /terminationGracePeriodSeconds \(60\) must exceed shutdownTimeoutSeconds \(960\)/,
  );
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
    "--shutdown-timeout=960s",
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
    "--shutdown-timeout=960s",
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
  assert.equal(full.reflection, false);
  assert.equal(full.bootstrapPath, "/run/bigfleet/bootstrap.sh");
  assert.deepEqual(full.bootstrapExec, ["/bin/bash", "-eu"]);
  // pve.large is priced explicitly; pve.small (2 vCPU, 4 GiB) from the rates.
  const price = (type: string) => full.slots.find((x) => x.instanceType === type)?.pricePerHour;
  assert.equal(price("pve.large"), 0.05);
  assert.equal(price("pve.small"), 2 * 0.004 + 4 * 0.00075);
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

Deno.test("chart: a template per node renders as a node=VMID list the program accepts", async () => {
  const perNode = await render([
    ...MINIMAL,
    "-f",
    await valuesFile("proxmox:\n  templateVMID:\n    pve2: 9001\n    pve1: 9000\n"),
  ]);
  const argv = args(perNode);
  assert.ok(argv.includes("--template-vmid=pve1=9000,pve2=9001"), argv.join(" "));
  const cfg = await loadRendered(perNode);
  assert.deepEqual(cfg.template, {
    kind: "per-zone",
    vmids: new Map([["pve1", 9000], ["pve2", 9001]]),
  });

  const byName = await render([
    ...MINIMAL,
    "--set",
    "proxmox.templateVMID=",
    "--set",
    "proxmox.templateName=k8s-golden",
  ]);
  assert.ok(args(byName).includes("--template-name=k8s-golden"), args(byName).join(" "));
  assert.ok(!args(byName).some((a) => a.startsWith("--template-vmid")));
  assert.deepEqual((await loadRendered(byName)).template, { kind: "name", name: "k8s-golden" });

  const bad = await template([
    ...MINIMAL,
    "-f",
    await valuesFile("proxmox:\n  templateVMID:\n    pve1: 12\n"),
  ]);
  assert.ok(!bad.ok);
  assert.match(bad.stderr, /templateVMID/);
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

/** A values file in a temp dir, for mistakes written the way operators write them. */
async function valuesFile(yaml: string): Promise<string> {
  const path = await Deno.makeTempFile({ suffix: ".yaml" });
  await Deno.writeTextFile(path, yaml);
  return path;
}

const SCHEMA_ERROR = /values don't meet the specifications of the schema/;

Deno.test("chart: values.schema.json rejects misspelled keys at render, naming them", async () => {
  const file = await valuesFile("state:\n  persistance:\n    size: 2Gi\n");
  try {
    const cases: [string[], RegExp][] = [
      [
        ["--set", "state.persistance.size=2Gi"],
        /at '\/state': additional properties 'persistance'/,
      ],
      [["-f", file], /at '\/state': additional properties 'persistance'/],
      [["--set", "proxmox.tempalteVMID=9000"], /at '\/proxmox'.*'tempalteVMID'/],
      [["--set", "credentials.token.secretname=x"], /at '\/credentials\/token'.*'secretname'/],
      [["--set", "monitoring.serviceMonitor.enable=true"], /'enable' not allowed/],
      [["--set", "pricing.perVCPUHour=0.1"], /at '\/pricing'.*'perVCPUHour'/],
      [["--set", "reconcile_interval=5m"], /additional properties 'reconcile_interval'/],
      [["--set", "helmTest.enabeld=false"], /'enabeld' not allowed/],
      [["--set", "livenessProbe.httpGet.path=/x"], /at '\/livenessProbe'.*'httpGet'/],
    ];
    for (const [values, message] of cases) {
      const res = await template([...MINIMAL, ...values]);
      assert.equal(res.ok, false, `${values.join(" ")} must not render`);
      assert.equal(res.stdout, "", "nothing rendered");
      assert.match(res.stderr, SCHEMA_ERROR, values.join(" "));
      assert.match(res.stderr, message, values.join(" "));
    }
  } finally {
    await Deno.remove(file);
  }
});

Deno.test("chart: values.schema.json rejects wrong types and malformed values at render", async () => {
  const cases: [string[], RegExp][] = [
    // Not --template-vmid=0: a word is an error.
    [["--set", "proxmox.templateVMID=abc"], /at '\/proxmox\/templateVMID'/],
    [["--set", "proxmox.templateVMID=99"], /at '\/proxmox\/templateVMID'/],
    [["--set", "proxmox.templateVMID=1000000000"], /at '\/proxmox\/templateVMID'/],
    [["--set", "ports.grpc=abc"], /at '\/ports\/grpc'.*want integer/],
    [["--set", "ports.metrics=70000"], /at '\/ports\/metrics'/],
    [["--set", "useFakeBackend=yes"], /at '\/useFakeBackend'.*want boolean/],
    [["--set", "tls.enabled=1"], /at '\/tls\/enabled'.*want boolean/],
    [["--set", "reflection=off"], /at '\/reflection'/],
    [["--set", "reconcileInterval=5"], /at '\/reconcileInterval'/],
    [["--set", "reconcileInterval=5x"], /at '\/reconcileInterval'/],
    [["--set", "reconcileInterval=-1m"], /at '\/reconcileInterval'/],
    [["--set", "pricing.perVcpuHour=cheap"], /at '\/pricing\/perVcpuHour'/],
    [["--set", "pricing.perGiBHour=-0.1"], /at '\/pricing\/perGiBHour'/],
    [["--set", "pricing.prices.pve\\.large=free"], /at '\/pricing\/prices\/pve\.large'/],
    [["--set", "bootstrap.path=relative/path"], /at '\/bootstrap\/path'/],
    [["--set", "bootstrap.exec=/bin/sh"], /at '\/bootstrap\/exec'.*want array/],
    [["--set", "bootstrap.exec={/bin/sh,}"], /at '\/bootstrap\/exec\/1'/],
    [["--set", "provider=dc1/a"], /at '\/provider'/],
    [["--set", "state.persistence.accessModes={ReadWriteSometimes}"], /accessModes\/0/],
    [["--set", "image.pullPolicy=Sometimes"], /at '\/image\/pullPolicy'/],
    [["--set", "monitoring.serviceMonitor.interval=30"], /serviceMonitor\/interval/],
    [["--set", 'monitoring.prometheusRule.job=a"b'], /prometheusRule\/job/],
    [["--set", "extraArgs={reconcile-interval=5m}"], /at '\/extraArgs\/0'/],
  ];
  for (const [values, message] of cases) {
    const res = await template([...MINIMAL, ...values]);
    assert.equal(res.ok, false, `${values.join(" ")} must not render`);
    assert.match(res.stderr, SCHEMA_ERROR, values.join(" "));
    assert.match(res.stderr, message, values.join(" "));
  }
  // The spellings an operator may legitimately use still render.
  for (
    const values of [
      ["--set-string", "proxmox.templateVMID=9000"],
      ["--set", "proxmox.templateVMID=999999999"],
      ["--set", "reconcileInterval=0"],
      ["--set", "reconcileInterval=1h30m"],
      ["--set", "reconcileInterval=1.5s"],
      ["--set", "pricing.perVcpuHour=0"],
      ["--set", "pricing.perGiBHour=.5"],
      ["--set", "image.tag=1.2"],
      ["--set", "global.anything=1"],
    ]
  ) {
    const res = await template([...MINIMAL, ...values]);
    assert.ok(res.ok, `${values.join(" ")}: ${res.stderr}`);
  }
});

Deno.test("chart: structured bootstrap, pricing, reconcile and reflection values reach the loader", async () => {
  const ms = await render([
    ...MINIMAL,
    ...WITH_FILES,
    "--set",
    "bootstrap.path=/opt/bigfleet/join",
    "--set",
    "bootstrap.exec={/usr/bin/env,bash,-e}",
    "--set",
    "pricing.prices.pve\\.large=0.05",
    "--set",
    "pricing.prices.pve\\.small=0.0125",
    "--set",
    "pricing.perVcpuHour=0.004",
    "--set",
    "pricing.perGiBHour=0.001",
    "--set",
    "reconcileInterval=45s",
    "--set",
    "reflection=false",
  ]);
  const a = args(ms);
  const tail = a.slice(
    a.indexOf("--instance-types=/etc/bigfleet/instance-types/instance-types.json"),
  );
  assert.deepEqual(tail, [
    "--instance-types=/etc/bigfleet/instance-types/instance-types.json",
    // Keys sorted, so the pod template (and the pod) is stable across renders.
    "--prices=pve.large=0.05,pve.small=0.0125",
    "--price-per-vcpu-hour=0.004",
    "--price-per-gib-hour=0.001",
    "--bootstrap-path=/opt/bigfleet/join",
    "--bootstrap-exec=/usr/bin/env,bash,-e",
    "--reconcile-interval=45s",
    "--reflection=false",
    "--shutdown-timeout=960s",
  ]);
  const cfg = await loadRendered(ms);
  assert.equal(cfg.bootstrapPath, "/opt/bigfleet/join");
  assert.deepEqual(cfg.bootstrapExec, ["/usr/bin/env", "bash", "-e"]);
  assert.equal(cfg.reconcileIntervalMs, 45_000);
  assert.equal(cfg.reflection, false);
  const types = JSON.parse(await Deno.readTextFile(`${EXAMPLES}/instance-types.example.json`));
  for (const slot of cfg.slots) {
    const explicit: Record<string, number> = { "pve.large": 0.05, "pve.small": 0.0125 };
    const t = types[slot.instanceType];
    const synthetic = t.vcpu * 0.004 + (t.memory_mib / 1024) * 0.001;
    assert.ok(
      Math.abs(slot.pricePerHour - (explicit[slot.instanceType] ?? synthetic)) < 1e-9,
      `${slot.id} priced ${slot.pricePerHour}`,
    );
  }

  // Unset values leave the provider's defaults alone: no flag at all.
  const bare = await loadRendered(await render(MINIMAL));
  assert.equal(bare.bootstrapPath, "/run/bigfleet-bootstrap");
  assert.deepEqual(bare.bootstrapExec, ["/bin/sh"]);
  assert.equal(bare.reconcileIntervalMs, 2 * 60_000);
  assert.equal(bare.reflection, true);

  // 0 turns reconcile off, whether --set typed it as a number or a string.
  for (const set of [["--set", "reconcileInterval=0"], ["--set-string", "reconcileInterval=0"]]) {
    const off = await render([...MINIMAL, ...set]);
    assert.ok(args(off).includes("--reconcile-interval=0"), args(off).join(" "));
    assert.equal((await loadRendered(off)).reconcileIntervalMs, 0);
  }
});

Deno.test("chart: extraArgs come last, so one can override a generated flag", async () => {
  const ms = await render([
    ...MINIMAL,
    "--set",
    "reconcileInterval=5m",
    "--set",
    "extraArgs={--reconcile-interval=7m}",
  ]);
  const a = args(ms);
  assert.equal(a.at(-1), "--reconcile-interval=7m");
  assert.ok(a.includes("--reconcile-interval=5m"));
  assert.equal((await loadRendered(ms)).reconcileIntervalMs, 7 * 60_000);
});

Deno.test("chart: helm test Pod runs preflight with the Deployment's flags and files, minus state", async () => {
  for (const values of [[...MINIMAL, ...WITH_FILES], FULL, MTLS]) {
    const ms = await render(values);
    const what = values.join(" ");
    const pod = one(ms, "Pod", "-preflight");
    assert.equal(pod.metadata.name, `${NAME}-preflight`);
    assert.equal(pod.metadata.annotations["helm.sh/hook"], "test");
    assert.equal(pod.metadata.annotations["helm.sh/hook-delete-policy"], "before-hook-creation");
    const test = preflightPod(ms);
    const serving = deploymentPod(ms);
    assert.equal(test.spec.restartPolicy, "Never");
    assert.equal(test.container.image, serving.container.image);
    assert.equal(test.container.imagePullPolicy, serving.container.imagePullPolicy);
    assert.deepEqual(test.container.securityContext, serving.container.securityContext);
    assert.deepEqual(test.spec.securityContext, serving.spec.securityContext);
    // Less the admin socket's address: it lives beside the state, which only the serving pod has.
    assert.deepEqual(
      test.container.env,
      serving.container.env.filter((e: Manifest) => e.name !== "BIGFLEET_ADMIN_SOCKET"),
    );
    assert.equal(test.spec.serviceAccountName, serving.spec.serviceAccountName);
    assert.equal(test.spec.automountServiceAccountToken, false);

    // `<binary> preflight <the serving flags>`; the state file stays with the serving pod.
    const [sub, ...flags] = test.container.args as string[];
    assert.equal(sub, "preflight", what);
    assert.deepEqual(flags, args(ms).filter((x) => !x.startsWith("--state=")), what);
    const noState = (xs: Manifest[]) => xs.filter((x) => x.name !== "state");
    assert.deepEqual(test.spec.volumes, noState(serving.spec.volumes), what);
    assert.deepEqual(test.container.volumeMounts, noState(serving.container.volumeMounts), what);
    // The loader accepts the flags with only the files this pod mounts.
    const cfg = await loadInPod(ms, test, flags);
    assert.equal(cfg.backend, "proxmox");
    assert.equal(cfg.statePath, "");

    // The Service must never route BigFleet's calls to the test Pod.
    const selector = one(ms, "Service").spec.selector;
    const labels = pod.metadata.labels;
    assert.ok(
      Object.entries(selector).some(([k, v]) => labels[k] !== v),
      `Service selector ${JSON.stringify(selector)} must not match ${JSON.stringify(labels)}`,
    );
  }

  const extra = preflightPod(await render([...MINIMAL, "--set", "helmTest.extraArgs={-o,json}"]));
  assert.deepEqual(extra.container.args.slice(-2), ["-o", "json"]);
  assert.equal(extra.container.args[0], "preflight");

  // Off by value, and never for the fake backend (nothing to check).
  for (const values of [[...MINIMAL, "--set", "helmTest.enabled=false"], FAKE]) {
    const ms = await render([...values]);
    assert.ok(!ms.some((m) => m.kind === "Pod"), values.join(" "));
  }
  assert.ok(
    !(await render([...FAKE, "--set", "helmTest.enabled=true"])).some((m) => m.kind === "Pod"),
  );
});

Deno.test("chart: values.yaml, values.schema.json and docs/install.md describe the same values", async () => {
  const { parse } = await import("yaml");
  const values = parse(await Deno.readTextFile(`${ROOT}deploy/helm/values.yaml`));
  const schema = JSON.parse(await Deno.readTextFile(`${ROOT}deploy/helm/values.schema.json`));
  // Key paths the schema closes (objects with their own properties) ...
  const schemaPaths: string[] = [];
  // deno-lint-ignore no-explicit-any
  const walkSchema = (node: any, prefix: string) => {
    for (const [k, sub] of Object.entries(node.properties ?? {})) {
      // deno-lint-ignore no-explicit-any
      const s = (sub as any).$ref
        ? schema.definitions[(sub as { $ref: string }).$ref.split("/").at(-1)!]
        : sub;
      schemaPaths.push(`${prefix}${k}`);
      if (s.additionalProperties === false) walkSchema(s, `${prefix}${k}.`);
    }
  };
  walkSchema(schema, "");
  // ... and the same paths in values.yaml, where every one has a default.
  const valuePaths: string[] = [];
  const walkValues = (node: Manifest, prefix: string, schemaNode: Manifest) => {
    for (const [k, v] of Object.entries(node)) {
      valuePaths.push(`${prefix}${k}`);
      const sub = schemaNode.properties?.[k];
      const s = sub?.$ref ? schema.definitions[sub.$ref.split("/").at(-1)] : sub;
      if (s?.additionalProperties === false && v && typeof v === "object") {
        walkValues(v as Manifest, `${prefix}${k}.`, s);
      }
    }
  };
  walkValues(values, "", schema);
  assert.deepEqual(
    valuePaths.sort(),
    schemaPaths.filter((p) => p !== "global").sort(),
    "every schema key has a default in values.yaml, and nothing else is there",
  );

  // Every top-level value is in the install guide's values table.
  const install = await Deno.readTextFile(`${ROOT}docs/install.md`);
  const table = install.slice(
    install.indexOf("### Values"),
    install.indexOf("### Render-time checks"),
  );
  for (const key of Object.keys(values)) {
    assert.match(table, new RegExp("`" + key + "[`.]"), `docs/install.md § Values lists ${key}`);
  }
});

/** The schema failures docs/install.md § Render-time checks explains, as helm prints them. */
const EXPLAINED_FAILURES = {
  exclusive: "- at '/proxmox/templateVMID': 'anyOf' failed",
  tokenId: "- at '/proxmox/tokenID': 'bigfleet' does not match pattern",
};

Deno.test("chart: templateVMID and templateName are exclusive in values.schema.json", async () => {
  const both = await template([...MINIMAL, "--set", "proxmox.templateName=k8s-golden"]);
  assert.equal(both.ok, false, "templateVMID 9000 (from the example) with templateName renders");
  assert.equal(both.stdout, "", "nothing rendered");
  assert.match(both.stderr, SCHEMA_ERROR);
  assert.ok(both.stderr.includes(EXPLAINED_FAILURES.exclusive), both.stderr);
  assert.match(both.stderr, /value must be ''/);
  for (
    const empty of [["--set", "proxmox.templateVMID="], ["--set", "proxmox.templateVMID=null"]]
  ) {
    const ms = await render([...MINIMAL, ...empty, "--set", "proxmox.templateName=k8s-golden"]);
    assert.deepEqual(args(ms).filter((a) => a.startsWith("--template-")), [
      "--template-name=k8s-golden",
    ]);
  }
});

Deno.test("chart: proxmox.tokenID must look like USER@REALM!TOKENID", async () => {
  for (const bad of ["bigfleet", "bigfleet@pve", "bigfleet!autoscaler", "a b@pve!x", "a@pve!x!y"]) {
    const res = await template([...MINIMAL, "--set-string", `proxmox.tokenID=${bad}`]);
    assert.equal(res.ok, false, `${bad} renders`);
    assert.match(res.stderr, SCHEMA_ERROR, bad);
    assert.ok(res.stderr.includes("- at '/proxmox/tokenID': "), `${bad}: ${res.stderr}`);
  }
  const res = await template([...MINIMAL, "--set-string", "proxmox.tokenID=bigfleet"]);
  assert.ok(res.stderr.includes(EXPLAINED_FAILURES.tokenId), res.stderr);
  for (const good of ["bigfleet@pve!autoscaler", "root@pam!ci-01", "svc.k8s@ad.example!t_1"]) {
    const ms = await render([...MINIMAL, "--set-string", `proxmox.tokenID=${good}`]);
    assert.ok(args(ms).includes(`--proxmox-token-id=${good}`), good);
  }
  // The fake backend needs none.
  assert.ok((await template([...FAKE, "--set", "proxmox.tokenID="])).ok);
});

Deno.test("chart: docs/install.md explains the schema failures helm prints in its own words", async () => {
  const install = await Deno.readTextFile(`${ROOT}docs/install.md`);
  const section = install.slice(
    install.indexOf("### Render-time checks"),
    install.indexOf("### gRPC TLS from the chart"),
  );
  for (const text of Object.values(EXPLAINED_FAILURES)) {
    assert.ok(section.includes(text.replace(/^- /, "")), `§ Render-time checks explains: ${text}`);
  }
});

Deno.test("chart: a per-node templateVMID map merges without helm's coalesce warning", async () => {
  const file = await valuesFile("proxmox:\n  templateVMID:\n    pve1: 9000\n    pve2: 9001\n");
  try {
    // Over the example's 9000, and over the chart's own default (the fake needs no example).
    for (const base of [MINIMAL, FAKE]) {
      const res = await template([...base, "-f", file]);
      assert.ok(res.ok, res.stderr);
      assert.equal(res.stderr, "", "helm printed nothing on stderr");
      assert.ok(
        args(parseManifests(res.stdout)).includes("--template-vmid=pve1=9000,pve2=9001"),
      );
    }
  } finally {
    await Deno.remove(file);
  }
});

Deno.test("chart: an optional NetworkPolicy admits grpcFrom to gRPC and metricsFrom to metrics only", async () => {
  assert.ok(
    !kinds(await render(MINIMAL)).some((k) => k.startsWith("NetworkPolicy/")),
    "off by default",
  );
  const on = [
    "--set",
    "networkPolicy.enabled=true",
    "--set",
    "networkPolicy.grpcFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=bigfleet",
  ];
  const ms = await render([...MINIMAL, ...on]);
  const np = one(ms, "NetworkPolicy");
  assert.equal(np.apiVersion, "networking.k8s.io/v1");
  assert.equal(np.metadata.namespace, NAMESPACE);
  // It selects exactly the provider's pods, by the labels the Deployment gives them.
  const podLabels = deployment(ms).spec.template.metadata.labels;
  for (const [k, v] of Object.entries(np.spec.podSelector.matchLabels)) {
    assert.equal(podLabels[k], v, k);
  }
  assert.deepEqual(np.spec.podSelector.matchLabels, deployment(ms).spec.selector.matchLabels);
  assert.deepEqual(np.spec.policyTypes, ["Ingress"]);
  const portNames = (container(ms).ports as Manifest[]).map((p) => p.name);
  assert.deepEqual(np.spec.ingress, [{
    from: [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "bigfleet" } } }],
    ports: [{ port: "grpc", protocol: "TCP" }],
  }], "no metricsFrom: nobody reaches the metrics port");
  assert.ok(portNames.includes("grpc") && portNames.includes("metrics"), portNames.join(" "));

  const withMetrics = one(
    await render([
      ...MINIMAL,
      ...on,
      "--set",
      "networkPolicy.metricsFrom[0].podSelector.matchLabels.app=prometheus",
    ]),
    "NetworkPolicy",
  );
  assert.deepEqual(withMetrics.spec.ingress[1], {
    from: [{ podSelector: { matchLabels: { app: "prometheus" } } }],
    ports: [{ port: "metrics", protocol: "TCP" }],
  });

  const open = await template([...MINIMAL, "--set", "networkPolicy.enabled=true"]);
  assert.equal(open.ok, false, "an empty grpcFrom would admit everyone");
  assert.match(open.stderr, /networkPolicy\.enabled=true needs networkPolicy\.grpcFrom/);
});

Deno.test("examples: every example values file pins the chart's appVersion as the image tag", async () => {
  const { parse } = await import("yaml");
  const chart = parse(await Deno.readTextFile(`${CHART}/Chart.yaml`));
  for (const file of ["values-minimal.yaml", "values-full.yaml", "values-mtls.yaml"]) {
    const values = parse(await Deno.readTextFile(`${EXAMPLES}/${file}`));
    assert.equal(String(values.image?.tag), chart.appVersion, `${file}: image.tag`);
  }
  const ms = await render(MINIMAL);
  assert.ok(container(ms).image.endsWith(`:${chart.appVersion}`), container(ms).image);
});
