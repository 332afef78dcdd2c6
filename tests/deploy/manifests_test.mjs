// Offline validation of deploy/ (node --test; run by manifests_test.sh).
// The kustomize base and the overlays (example, plaintext, production) are
// rendered without kubectl,
// every object is validated against the Kubernetes / Prometheus Operator
// schemas with unknown fields refused, and the shardd rules are checked.
// Each check also has a case that breaks the input on purpose and expects
// the check to say so, so that a check that can never fail is caught.

import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { describe, test } from "node:test";

import * as v from "../../deploy/validate/validate.mjs";

const render = (name) => v.renderKustomization(v.KUSTOMIZATIONS[name]);
const trainerOf = (objects) => objects.find((o) => o.kind === "StatefulSet" && o.metadata.name === "shardd-trainer");
const sidecarOf = (objects) => trainerOf(objects).spec.template.spec.initContainers.find((c) => c.name === "shardd");
const coordinatorOf = (objects) => objects.find((o) => o.kind === "Deployment" && o.metadata.name === "shardd-coordinator").spec.template.spec.containers[0];
const trainerContainerOf = (objects) => trainerOf(objects).spec.template.spec.containers.find((c) => c.name === "trainer");
const some = (errors, pattern) => errors.some((e) => pattern.test(e));

function tmpDir() {
  return fs.mkdtempSync(path.join(process.env.TEST_TMPDIR ?? os.tmpdir(), "deploy-"));
}

for (const name of ["base", "example", "plaintext", "production"]) {
  describe(`kustomization ${name}`, () => {
    test("renders the coordinator, trainer, GPU claim, services, monitors, rules and NetworkPolicies (production: and cert-manager's)", () => {
      const kinds = render(name).map((o) => `${o.kind}/${o.metadata.name}`).sort();
      const certManager = name === "production"
        ? ["Certificate/shardd-ca", "Certificate/shardd-tls", "Issuer/shardd-ca", "Issuer/shardd-selfsigned"]
        : [];
      assert.deepEqual(kinds, [
        ...certManager,
        "ConfigMap/shardd-job",
        "Deployment/shardd-coordinator",
        "NetworkPolicy/shardd-coordinator",
        "NetworkPolicy/shardd-metrics",
        "NetworkPolicy/shardd-trainer",
        "PodMonitor/shardd",
        "PrometheusRule/shardd",
        "ResourceClaimTemplate/shardd-gpu",
        "Service/shardd-coordinator",
        "Service/shardd-peers",
        "ServiceMonitor/shardd-coordinator",
        "StatefulSet/shardd-trainer",
      ].sort());
    });
    test("every object validates against its schema, with no unknown field", async () => {
      assert.deepEqual(await v.validateSchemas(render(name)), []);
    });
    test("shardd is a native sidecar sharing the socket volume and the GPU claim with the trainer", () => {
      assert.deepEqual(v.checkSidecar(render(name)), []);
    });
    test("every container runs under the restricted security profile", () => {
      assert.deepEqual(v.checkRestricted(render(name)), []);
    });
    test("gRPC health probes; liveness differs from readiness", () => {
      assert.deepEqual(v.checkProbes(render(name)), []);
    });
    test("TLS: key and CA with the certificate, probes on the health port, PEM files from a read-only Secret", () => {
      assert.deepEqual(v.checkTls(render(name)), []);
    });
    test("job shape: replicas = W, F divides W, addresses, monitors, alert window", () => {
      assert.deepEqual(v.checkJob(render(name)), []);
    });
    test("the PrometheusRule carries exactly the groups of alerts.yml", () => {
      assert.deepEqual(v.checkRules(render(name)), []);
    });
    test("NetworkPolicies admit exactly the intended peers to every port a pod opens", () => {
      assert.deepEqual(v.checkNetworkPolicies(render(name)), []);
    });
    test("cert-manager: issuers deployed, the TLS Secret's Certificate names every dialled host", () => {
      assert.deepEqual(v.checkCertificates(render(name)), []);
    });
  });
}

describe("example overlay", () => {
  test("puts every object in namespace ml-training", () => {
    for (const o of render("example")) assert.equal(o.metadata.namespace, "ml-training", `${o.kind}/${o.metadata.name}`);
  });
  test("runs W = 8, F = 4 with 8 replicas", () => {
    const objects = render("example");
    const cm = objects.find((o) => o.kind === "ConfigMap");
    assert.equal(cm.data.WORLD_SIZE, "8");
    assert.equal(cm.data.SHARDING_FACTOR, "4");
    assert.equal(cm.data.LEASE_MS, "10000", "keys the overlay does not patch stay");
    assert.equal(trainerOf(objects).spec.replicas, 8);
  });
  test("pins every image to a registry and tag", () => {
    const objects = render("example");
    assert.deepEqual(v.checkImagesPinned(objects), []);
    assert.equal(sidecarOf(objects).image, "registry.example.com/shardd/shardd:0.1.0");
    assert.equal(trainerContainerOf(objects).image, "registry.example.com/shardd/shardd:0.1.0");
  });
  test("patches merge containers and volumes by name and replace args", () => {
    const objects = render("example");
    const sidecar = sidecarOf(objects);
    assert.equal(sidecar.resources.limits.memory, "20Gi");
    assert.deepEqual(sidecar.resources.claims, [{ name: "gpu" }], "unpatched fields of a merged container stay");
    assert.equal(sidecar.restartPolicy, "Always");
    assert.ok(trainerContainerOf(objects).args.includes("--hidden=1024"));
    assert.ok(!trainerContainerOf(objects).args.includes("--steps=1000000"), "args are replaced, not appended");
    const vol = trainerOf(objects).spec.template.spec.volumes.find((x) => x.name === "shardd-run");
    assert.deepEqual(vol.emptyDir, { medium: "Memory", sizeLimit: "16Gi" });
    assert.equal(trainerOf(objects).spec.template.spec.volumes.length, 2);
  });
  test("adds the Prometheus selection label to the monitors and the rule", () => {
    for (const o of render("example").filter((x) => x.apiVersion.startsWith("monitoring.coreos.com"))) {
      assert.equal(o.metadata.labels.release, "kube-prometheus-stack", `${o.kind}/${o.metadata.name}`);
      assert.equal(o.metadata.labels["app.kubernetes.io/part-of"], "shardd");
    }
  });
});

describe("production overlay (mutual TLS)", () => {
  const tlsFlags = ["--tls_cert=/etc/shardd/tls/tls.crt", "--tls_key=/etc/shardd/tls/tls.key", "--tls_ca=/etc/shardd/tls/ca.crt", "--health_listen=0.0.0.0:7072"];
  test("inherits the example: namespace, W = 8, pinned images, monitor labels", () => {
    const objects = render("production");
    for (const o of objects) assert.equal(o.metadata.namespace, "ml-training", `${o.kind}/${o.metadata.name}`);
    assert.equal(trainerOf(objects).spec.replicas, 8);
    assert.equal(sidecarOf(objects).resources.limits.memory, "20Gi");
    assert.deepEqual(v.checkImagesPinned(objects), []);
    assert.equal(objects.find((o) => o.kind === "PodMonitor").metadata.labels.release, "kube-prometheus-stack");
  });
  test("turns on mutual TLS in the coordinator and the sidecar, not in the trainer", () => {
    const objects = render("production");
    for (const c of [coordinatorOf(objects), sidecarOf(objects)]) {
      for (const f of tlsFlags) assert.ok(c.args.includes(f), `${c.name}: ${f}`);
      assert.ok(!c.args.includes("--insecure"), `${c.name}: --insecure`);
    }
    assert.equal(v.flag(trainerContainerOf(objects), "tls_cert"), undefined);
    assert.ok(!(trainerContainerOf(objects).volumeMounts ?? []).some((m) => m.name === "shardd-tls"), "the trainer does not see the key");
  });
  test("keeps the base's other arguments", () => {
    const base = render("base");
    const objects = render("production");
    for (const [c, b] of [[coordinatorOf(objects), coordinatorOf(base)], [sidecarOf(objects), sidecarOf(base)]]) {
      const rest = c.args.filter((a) => !tlsFlags.includes(a));
      const changed = b.args.filter((a) => !rest.includes(a));
      // All but --insecure (TLS replaces it) and, for the sidecar, the peer
      // address (a DNS name the certificate can hold).
      assert.deepEqual(changed, c.name === "shardd" ? ["--peer_listen=$(POD_IP):7071", "--insecure"] : ["--insecure"], c.name);
    }
    assert.equal(v.flag(sidecarOf(objects), "peer_listen"), "$(POD_NAME).shardd-peers.$(POD_NAMESPACE).svc.cluster.local:7071");
    assert.ok(sidecarOf(objects).env.some((e) => e.name === "POD_NAMESPACE" && e.valueFrom.fieldRef.fieldPath === "metadata.namespace"));
  });
  test("moves every gRPC probe to the health port 7072, with the base's services", () => {
    const base = render("base");
    const objects = render("production");
    for (const [c, b] of [[coordinatorOf(objects), coordinatorOf(base)], [sidecarOf(objects), sidecarOf(base)]]) {
      assert.ok(c.ports.some((p) => p.name === "health" && p.containerPort === 7072), c.name);
      assert.ok(c.ports.some((p) => p.name === "metrics" && p.containerPort === 9090), `${c.name}: the base's ports stay`);
      for (const kind of ["startupProbe", "readinessProbe", "livenessProbe"]) {
        if (!b[kind]) continue;
        assert.equal(c[kind].grpc.port, 7072, `${c.name} ${kind}`);
        assert.equal(c[kind].grpc.service, b[kind].grpc.service, `${c.name} ${kind} service`);
        assert.equal(c[kind].periodSeconds, b[kind].periodSeconds, `${c.name} ${kind}: timing stays`);
      }
    }
  });
  test("mounts Secret shardd-tls read-only, mode 0440, readable through fsGroup 65532", () => {
    const objects = render("production");
    for (const o of objects.filter((x) => ["Deployment", "StatefulSet"].includes(x.kind))) {
      const spec = o.spec.template.spec;
      assert.equal(spec.securityContext.fsGroup, 65532, o.kind);
      assert.deepEqual(spec.volumes.find((x) => x.name === "shardd-tls").secret, { secretName: "shardd-tls", defaultMode: 0o440 });
    }
    for (const c of [coordinatorOf(objects), sidecarOf(objects)]) {
      assert.deepEqual(c.volumeMounts.find((m) => m.name === "shardd-tls"), { name: "shardd-tls", mountPath: "/etc/shardd/tls", readOnly: true });
    }
  });
  test("cert-manager issues Secret shardd-tls in the pods' namespace: self-signed issuer, CA, CA issuer, server and client auth", () => {
    const objects = render("production");
    const cm = objects.filter((o) => o.apiVersion === "cert-manager.io/v1");
    for (const o of cm) assert.equal(o.metadata.namespace, "ml-training", `${o.kind}/${o.metadata.name}`);
    const byName = (kind, name) => cm.find((o) => o.kind === kind && o.metadata.name === name);
    assert.deepEqual(byName("Issuer", "shardd-selfsigned").spec, { selfSigned: {} });
    assert.equal(byName("Certificate", "shardd-ca").spec.isCA, true);
    assert.equal(byName("Certificate", "shardd-ca").spec.issuerRef.name, "shardd-selfsigned");
    assert.deepEqual(byName("Issuer", "shardd-ca").spec, { ca: { secretName: "shardd-ca" } });
    const tls = byName("Certificate", "shardd-tls");
    assert.equal(tls.spec.secretName, "shardd-tls");
    assert.equal(tls.spec.issuerRef.name, "shardd-ca");
    for (const u of ["server auth", "client auth"]) assert.ok(tls.spec.usages.includes(u), u);
    assert.ok(tls.spec.dnsNames.includes("shardd-coordinator"));
    assert.ok(tls.spec.dnsNames.includes("*.shardd-peers.ml-training.svc.cluster.local"));
  });
});

describe("plaintext overlay", () => {
  test("is the example, object for object: no TLS flag, no TLS Secret, no cert-manager object", () => {
    const objects = render("plaintext");
    assert.deepEqual(objects, render("example"));
    for (const o of objects) {
      for (const c of [...(o.spec?.template?.spec?.initContainers ?? []), ...(o.spec?.template?.spec?.containers ?? [])]) {
        assert.equal(v.flag(c, "tls_cert"), undefined, c.name);
      }
    }
  });
  test("keeps the NetworkPolicies", () => {
    assert.equal(render("plaintext").filter((o) => o.kind === "NetworkPolicy").length, 3);
  });
  test("says --insecure in both binaries, as they require for plaintext beyond loopback", () => {
    const objects = render("plaintext");
    for (const c of [coordinatorOf(objects), sidecarOf(objects)]) assert.ok(c.args.includes("--insecure"), c.name);
    assert.deepEqual(v.checkInsecure(objects), []);
  });
});

describe("TLS checks fail when", () => {
  const without = (c, name) => { c.args = c.args.filter((a) => !a.startsWith(`--${name}=`)); };
  test("a probe targets the TLS peer port", () => {
    const objects = render("production");
    sidecarOf(objects).readinessProbe.grpc.port = 7071;
    assert.deepEqual(v.checkTls(objects), [
      "StatefulSet/ml-training/shardd-trainer: container shardd: readinessProbe.grpc.port 7071 is the TLS port of --peer_listen, which refuses the kubelet's plaintext probe; must be the --health_listen port 7072",
    ]);
  });
  test("a probe targets the coordinator's TLS API port", () => {
    const objects = render("production");
    coordinatorOf(objects).livenessProbe.grpc.port = 7070;
    const errors = v.checkTls(objects);
    assert.ok(some(errors, /Deployment\/ml-training\/shardd-coordinator: container coordinator: livenessProbe.grpc.port 7070 is the TLS port of --listen/), errors.join("\n"));
  });
  test("--tls_ca is missing", () => {
    const objects = render("production");
    without(sidecarOf(objects), "tls_ca");
    const errors = v.checkTls(objects);
    assert.ok(some(errors, /container shardd: --tls_cert without --tls_ca \(.*not mutual\)/), errors.join("\n"));
  });
  test("--tls_key is missing", () => {
    const objects = render("production");
    without(coordinatorOf(objects), "tls_key");
    assert.ok(some(v.checkTls(objects), /container coordinator: --tls_cert without --tls_key/));
  });
  test("--health_listen is missing", () => {
    const objects = render("production");
    without(coordinatorOf(objects), "health_listen");
    assert.deepEqual(v.checkTls(objects), [
      "Deployment/ml-training/shardd-coordinator: container coordinator: --tls_cert without --health_listen: the kubelet's plaintext gRPC probes cannot reach a TLS port",
    ]);
  });
  test("a certificate path is not under a Secret mount", () => {
    const objects = render("production");
    const c = sidecarOf(objects);
    c.args = c.args.map((a) => (a.startsWith("--tls_cert=") ? "--tls_cert=/tmp/tls.crt" : a));
    c.args = c.args.map((a) => (a.startsWith("--tls_ca=") ? "--tls_ca=/etc/ssl/ca.crt" : a));
    const errors = v.checkTls(objects);
    assert.ok(some(errors, /container shardd: --tls_cert \/tmp\/tls.crt is under mount \/tmp of volume 'tmp', which is not a Secret/), errors.join("\n"));
    assert.ok(some(errors, /container shardd: --tls_ca \/etc\/ssl\/ca.crt is not under a volumeMount/), errors.join("\n"));
  });
  test("the Secret mount is writable", () => {
    const objects = render("production");
    delete sidecarOf(objects).volumeMounts.find((m) => m.name === "shardd-tls").readOnly;
    assert.ok(some(v.checkTls(objects), /container shardd: --tls_key \/etc\/shardd\/tls\/tls.key: mount \/etc\/shardd\/tls must be readOnly/));
  });
  test("the Secret is mounted with subPath, which rotation never reaches", () => {
    const objects = render("production");
    const c = sidecarOf(objects);
    c.volumeMounts.find((m) => m.name === "shardd-tls").subPath = "tls.crt";
    assert.ok(some(v.checkTls(objects), /container shardd: --tls_cert \/etc\/shardd\/tls\/tls.crt: mount \/etc\/shardd\/tls uses subPath, which the kubelet never updates/));
  });
  test("the container's user cannot read the Secret's files", () => {
    const objects = render("production");
    const coordinator = objects.find((o) => o.kind === "Deployment");
    delete coordinator.spec.template.spec.securityContext.fsGroup;
    const errors = v.checkTls(objects);
    assert.ok(some(errors, /container coordinator: --tls_key \/etc\/shardd\/tls\/tls.key: Secret volume 'shardd-tls' mode 0440 is not readable by uid 65532/), errors.join("\n"));
    assert.ok(!some(errors, /container shardd/), "the trainer pod keeps its fsGroup");
  });
  test("the daemon registers its pod IP as its peer address", () => {
    const objects = render("production");
    const c = sidecarOf(objects);
    c.args = c.args.map((a) => (a.startsWith("--peer_listen=") ? "--peer_listen=$(POD_IP):7071" : a));
    assert.ok(some(v.checkTls(objects), /container shardd: --peer_listen host \$\(POD_IP\): .*cannot name every pod IP/));
  });
  test("but containers without --tls_cert are not checked", () => {
    const objects = render("example");
    sidecarOf(objects).args.push("--tls_ca=/nowhere/ca.crt");
    assert.deepEqual(v.checkTls(objects), []);
  });
});

describe("plaintext checks fail when", () => {
  test("a plaintext binary listens beyond loopback without --insecure", () => {
    const objects = render("plaintext");
    coordinatorOf(objects).args = coordinatorOf(objects).args.filter((a) => a !== "--insecure");
    assert.deepEqual(v.checkInsecure(objects), [
      "Deployment/ml-training/shardd-coordinator: container coordinator: --listen=0.0.0.0:7070 is plaintext beyond loopback without --insecure: the binary refuses to start",
    ]);
  });
  test("a TLS binary also says --insecure", () => {
    const objects = render("production");
    sidecarOf(objects).args.push("--insecure");
    const errors = v.checkInsecure(objects);
    assert.ok(some(errors, /container shardd: --insecure with --tls_cert/), errors.join("\n"));
  });
  test("loopback and Unix sockets need nothing", () => {
    for (const a of ["127.0.0.1:7070", "localhost:1", "[::1]:7070", "unix:/run/s.sock", "/run/s.sock"]) assert.ok(v.isLoopback(a), a);
    for (const a of ["0.0.0.0:7070", "$(POD_IP):7071", "shardd-coordinator:7070", "[::]:7070"]) assert.ok(!v.isLoopback(a), a);
  });
});

describe("NetworkPolicy checks", () => {
  const policy = (objects, name) => objects.find((o) => o.kind === "NetworkPolicy" && o.metadata.name === name);
  const ns = "StatefulSet/ml-training/shardd-trainer";
  const coord = "Deployment/ml-training/shardd-coordinator";
  test("the base's policies, port by port", () => {
    const objects = render("base");
    const rules = (name) => policy(objects, name).spec.ingress.map((r) => ({ from: r.from.map((f) => f.podSelector?.matchLabels ?? f.namespaceSelector.matchLabels), ports: r.ports }));
    assert.deepEqual(rules("shardd-coordinator"), [{ from: [{ "app.kubernetes.io/name": "shardd-trainer" }], ports: [{ protocol: "TCP", port: 7070 }] }]);
    assert.deepEqual(rules("shardd-trainer"), [
      { from: [{ "app.kubernetes.io/name": "shardd-trainer" }], ports: [{ protocol: "TCP" }] },
      { from: [{ "app.kubernetes.io/name": "shardd-coordinator" }], ports: [{ protocol: "TCP", port: 7071 }] },
    ]);
    assert.deepEqual(rules("shardd-metrics"), [{ from: [{ "kubernetes.io/metadata.name": "monitoring" }], ports: [{ protocol: "TCP", port: 9090 }] }]);
  });
  test("fail when the coordinator may no longer probe the peer port", () => {
    const objects = render("production");
    policy(objects, "shardd-trainer").spec.ingress.pop();
    assert.deepEqual(v.checkNetworkPolicies(objects), [`${ns}: port 7071 (--peer_listen of container shardd): no NetworkPolicy admits coordinator`]);
  });
  test("fail when trainer pods may not reach each other's Gloo ports", () => {
    const objects = render("production");
    policy(objects, "shardd-trainer").spec.ingress.shift();
    const errors = v.checkNetworkPolicies(objects);
    assert.ok(some(errors, /port 7071 \(--peer_listen of container shardd\): no NetworkPolicy admits trainer/), errors.join("\n"));
    assert.ok(some(errors, /Gloo's ephemeral ports 32768-60999 .*: no NetworkPolicy admits trainer \(port 32768 for one\)/), errors.join("\n"));
  });
  test("fail when the Gloo range is cut short, pass when it is narrowed to exactly 7071 and the ephemeral range", () => {
    const objects = render("production");
    policy(objects, "shardd-trainer").spec.ingress[0].ports = [{ protocol: "TCP", port: 7071 }, { protocol: "TCP", port: 32768, endPort: 60999 }];
    assert.deepEqual(v.checkNetworkPolicies(objects), []);
    policy(objects, "shardd-trainer").spec.ingress[0].ports[1].endPort = 40000;
    assert.deepEqual(v.checkNetworkPolicies(objects), [`${ns}: Gloo's ephemeral ports 32768-60999 (the --peer_listen host): no NetworkPolicy admits trainer (port 40001 for one)`]);
  });
  test("fail when a rule admits more than the intended peers", () => {
    const objects = render("production");
    delete policy(objects, "shardd-coordinator").spec.ingress[0].from;
    policy(objects, "shardd-metrics").spec.ingress[0].from[0].namespaceSelector = {};
    policy(objects, "shardd-trainer").spec.ingress[1].ports = [{ protocol: "TCP" }];
    const errors = v.checkNetworkPolicies(objects);
    assert.ok(errors.includes(`${coord}: port 7070 (--listen of container coordinator): NetworkPolicies also admit anywhere; only trainer may connect`), errors.join("\n"));
    assert.ok(errors.includes(`${coord}: port 9090 (--metrics_port of container coordinator): NetworkPolicies also admit every namespace; only monitoring may connect`), errors.join("\n"));
    assert.ok(errors.includes(`${ns}: port 7072 (--health_listen of container shardd): NetworkPolicies also admit coordinator; only trainer may connect`), errors.join("\n"));
    assert.ok(some(errors, /Gloo's ephemeral ports .*: NetworkPolicies also admit coordinator/), errors.join("\n"));
  });
  test("fail when a port is added without a rule, or a listen flag moves", () => {
    const objects = render("production");
    trainerContainerOf(objects).ports = [{ name: "tensorboard", containerPort: 6006 }];
    const c = coordinatorOf(objects);
    c.args = c.args.map((a) => (a.startsWith("--metrics_port=") ? "--metrics_port=9100" : a));
    c.ports.find((p) => p.name === "metrics").containerPort = 9100;
    const errors = v.checkNetworkPolicies(objects);
    assert.ok(some(errors, /containerPort 6006 'tensorboard' of container trainer is opened by no flag in PORT_PEERS/), errors.join("\n"));
    assert.ok(errors.includes(`${coord}: port 9100 (--metrics_port of container coordinator): no NetworkPolicy admits monitoring`), errors.join("\n"));
  });
  test("fail when no policy selects the pods, or a listen port is not fixed", () => {
    const objects = render("plaintext").filter((o) => o.kind !== "NetworkPolicy");
    sidecarOf(objects).args.push("--listen_tcp=0.0.0.0:0");
    const errors = v.checkNetworkPolicies(objects);
    assert.ok(errors.includes(`${ns}: no NetworkPolicy selects its pods: every port is open to anyone`), errors.join("\n"));
    assert.ok(errors.includes(`${coord}: no NetworkPolicy selects its pods: every port is open to anyone`), errors.join("\n"));
    assert.ok(some(errors, /--listen_tcp=0.0.0.0:0: a NetworkPolicy can only cover a fixed port/), errors.join("\n"));
    assert.ok(some(errors, /port 7071 \(--peer_listen of container shardd\): NetworkPolicies also admit anywhere/), errors.join("\n"));
  });
  test("fail when the policies sit in another namespace than the pods", () => {
    const objects = render("production");
    for (const o of objects.filter((x) => x.kind === "NetworkPolicy")) delete o.metadata.namespace;
    assert.ok(some(v.checkNetworkPolicies(objects), /no NetworkPolicy selects its pods/));
  });
  test("a pod's own ip_local_port_range sysctl moves the Gloo range", () => {
    const objects = render("production");
    policy(objects, "shardd-trainer").spec.ingress[0].ports = [{ protocol: "TCP", port: 7071 }, { protocol: "TCP", port: 32768, endPort: 60999 }];
    trainerOf(objects).spec.template.spec.securityContext.sysctls = [{ name: "net.ipv4.ip_local_port_range", value: "20000 29999" }];
    assert.ok(some(v.checkNetworkPolicies(objects), /Gloo's ephemeral ports 20000-29999 .*no NetworkPolicy admits trainer \(port 20000 for one\)/));
  });
  test("selectors: matchLabels and matchExpressions", () => {
    const labels = { a: "1", b: "2" };
    assert.ok(v.selectorMatches({ matchLabels: { a: "1" }, matchExpressions: [{ key: "b", operator: "In", values: ["2", "3"] }] }, labels));
    assert.ok(!v.selectorMatches({ matchExpressions: [{ key: "b", operator: "NotIn", values: ["2"] }] }, labels));
    assert.ok(v.selectorMatches({ matchExpressions: [{ key: "c", operator: "DoesNotExist" }] }, labels));
    assert.ok(v.selectorMatches({}, labels), "an empty selector selects every pod");
  });
});

describe("certificate checks fail when", () => {
  const cert = (objects, name) => objects.find((o) => o.kind === "Certificate" && o.metadata.name === name);
  test("the certificate does not name the peers' wildcard or the coordinator", () => {
    const objects = render("production");
    cert(objects, "shardd-tls").spec.dnsNames = ["shardd-coordinator.ml-training.svc", "*.shardd-peers.other.svc.cluster.local"];
    const errors = v.checkCertificates(objects);
    assert.ok(some(errors, /dnsNames do not cover \*\.shardd-peers\.ml-training\.svc\.cluster\.local \(--peer_listen of StatefulSet/), errors.join("\n"));
    assert.ok(some(errors, /dnsNames do not cover shardd-coordinator \(--coordinator of the daemons of Deployment/), errors.join("\n"));
  });
  test("the JobSet form's certificate does not name the JobSet's subdomain (a JobSet renamed without its dnsNames)", () => {
    const objects = render("jobset-tls");
    assert.deepEqual(v.checkCertificates(objects), []);
    const tls = cert(objects, "shardd-tls");
    assert.deepEqual(tls.spec.dnsNames, ["*.shardd", "*.shardd.ml-training.svc", "*.shardd.ml-training.svc.cluster.local"]);
    objects.find((o) => o.kind === "JobSet").metadata.name = "run-7";
    const errors = v.checkCertificates(objects);
    assert.ok(some(errors, /dnsNames do not cover run-7-coordinator-0-0\.run-7 \(--coordinator of the daemons/), errors.join("\n"));
    assert.ok(some(errors, /dnsNames do not cover \*\.run-7\.ml-training\.svc\.cluster\.local \(--peer_listen of JobSet/), errors.join("\n"));
  });
  test("it lacks client auth", () => {
    const objects = render("production");
    cert(objects, "shardd-tls").spec.usages = ["server auth"];
    assert.ok(some(v.checkCertificates(objects), /usages lack 'client auth'/));
  });
  test("its issuer is not deployed, or the CA issuer's Secret is no CA", () => {
    const objects = render("production");
    cert(objects, "shardd-ca").spec.isCA = false;
    cert(objects, "shardd-tls").spec.issuerRef.name = "missing";
    const errors = v.checkCertificates(objects);
    assert.ok(some(errors, /issuerRef names Issuer 'missing', which is not deployed/), errors.join("\n"));
    assert.ok(some(errors, /Issuer\/ml-training\/shardd-ca: signs with Secret shardd-ca, made by .*not a CA/), errors.join("\n"));
  });
  test("the Certificate is in another namespace than the pods", () => {
    const objects = render("production");
    delete cert(objects, "shardd-tls").metadata.namespace;
    assert.ok(some(v.checkCertificates(objects), /Secret shardd-tls is made by Certificate\/shardd-tls, in no namespace/));
  });
  test("a misspelt cert-manager field is an error", async () => {
    const objects = render("production");
    cert(objects, "shardd-tls").spec.dnsName = ["x"];
    objects.find((o) => o.kind === "Issuer" && o.metadata.name === "shardd-ca").spec.ca.secret = "x";
    const errors = await v.validateSchemas(objects);
    assert.ok(some(errors, /Certificate\/ml-training\/shardd-tls.spec: unknown field 'dnsName'/), errors.join("\n"));
    assert.ok(some(errors, /Issuer\/ml-training\/shardd-ca.spec.ca: unknown field 'secret'/), errors.join("\n"));
  });
});

describe("renderer", () => {
  test("strategic merge: lists of containers merge by name (new entries first, as kustomize), null deletes, primitive lists are replaced", () => {
    const base = { spec: { containers: [{ name: "a", image: "x", args: ["1", "2"] }, { name: "b", image: "y" }], keep: 1, drop: 2 } };
    const out = v.strategicMerge(base, { spec: { containers: [{ name: "a", args: ["3"] }, { name: "c", image: "z" }, { name: "d" }], drop: null } });
    assert.deepEqual(out, { spec: { containers: [{ name: "c", image: "z" }, { name: "d" }, { name: "a", image: "x", args: ["3"] }, { name: "b", image: "y" }], keep: 1 } });
    assert.deepEqual(base.spec.containers[0].args, ["1", "2"], "the base is not modified");
  });
  test("NetworkPolicy ingress rules are replaced whole by a patch, as in Kubernetes", () => {
    const base = { spec: { podSelector: {}, ingress: [{ ports: [{ port: 1 }] }, { ports: [{ port: 2 }] }] } };
    assert.deepEqual(v.strategicMerge(base, { spec: { ingress: [{ ports: [{ port: 3 }] }] } }).spec.ingress, [{ ports: [{ port: 3 }] }]);
  });
  test("refuses a list of objects without a known merge key", () => {
    assert.throws(() => v.strategicMerge({ spec: { rules: [{ a: 1 }] } }, { spec: { rules: [{ a: 2 }] } }), /no merge key/);
  });
  test("refuses unsupported kustomization features and patches without a target", () => {
    const dir = tmpDir();
    fs.writeFileSync(path.join(dir, "cm.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n");
    fs.writeFileSync(path.join(dir, "kustomization.yaml"), "resources: [cm.yaml]\nnameSuffix: -x\n");
    assert.throws(() => v.renderKustomization(dir), /'nameSuffix' is not supported/);
    fs.writeFileSync(path.join(dir, "patch.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n");
    fs.writeFileSync(path.join(dir, "kustomization.yaml"), "resources: [cm.yaml]\npatches: [{path: patch.yaml}]\n");
    assert.throws(() => v.renderKustomization(dir), /no v1 ConfigMap named 'b'/);
  });
  test("images: replaces name and tag, keeps other images", () => {
    assert.equal(v.imageName("reg:5000/a/b:1.0"), "reg:5000/a/b");
    assert.equal(v.imageName("b@sha256:00"), "b");
    assert.equal(v.imageName("b"), "b");
  });
});

describe("schemas", () => {
  test("an unknown kind or apiVersion is an error", async () => {
    const errors = await v.validateSchemas([
      { apiVersion: "apps/v1", kind: "Statefulset", metadata: { name: "x" } },
      { apiVersion: "example.com/v1", kind: "Widget", metadata: { name: "y" } },
    ]);
    assert.ok(some(errors, /Statefulset\/x: unknown kind 'Statefulset'/), errors.join("\n"));
    assert.ok(some(errors, /Widget\/y: unknown apiVersion 'example.com\/v1'/), errors.join("\n"));
  });
  test("a field of the wrong type is an error", async () => {
    const objects = render("base");
    trainerOf(objects).spec.replicas = "four";
    assert.ok(some(await v.validateSchemas(objects), /StatefulSet\/shardd-trainer.*replicas must be integer/));
  });
  test("a misspelt field is an error, at any depth and in every kind", async () => {
    const objects = render("base");
    sidecarOf(objects).restartpolicy = "Always";
    sidecarOf(objects).livenessProbe.grpc.servce = "x";
    objects.find((o) => o.kind === "PodMonitor").spec.podMetricsEndpoints[0].prot = "metrics";
    objects.find((o) => o.kind === "ResourceClaimTemplate").spec.spec.devices.requests[0].exactly.cnt = 1;
    const errors = await v.validateSchemas(objects);
    for (const field of ["restartpolicy", "servce", "prot", "cnt"]) {
      assert.ok(some(errors, new RegExp(`unknown field '${field}'`)), `${field}: ${errors.join("\n")}`);
    }
  });
});

describe("sidecar checks fail when", () => {
  test("shardd lacks restartPolicy: Always", () => {
    const objects = render("base");
    delete sidecarOf(objects).restartPolicy;
    assert.ok(some(v.checkSidecar(objects), /restartPolicy must be Always/));
  });
  test("shardd is a regular container", () => {
    const objects = render("base");
    const spec = trainerOf(objects).spec.template.spec;
    spec.containers.push(spec.initContainers.pop());
    assert.ok(some(v.checkSidecar(objects), /must be an init container/));
  });
  test("the containers reference different claims, or a plain GPU limit", () => {
    const objects = render("base");
    trainerOf(objects).spec.template.spec.resourceClaims.push({ name: "gpu2", resourceClaimTemplateName: "shardd-gpu" });
    trainerContainerOf(objects).resources.claims = [{ name: "gpu2" }];
    sidecarOf(objects).resources.limits["nvidia.com/gpu"] = 1;
    const errors = v.checkSidecar(objects);
    assert.ok(some(errors, /must reference the same resource claim/), errors.join("\n"));
    assert.ok(some(errors, /nvidia.com\/gpu/), errors.join("\n"));
  });
  test("a claim's template is not deployed", () => {
    const objects = render("base").filter((o) => o.kind !== "ResourceClaimTemplate");
    assert.ok(some(v.checkSidecar(objects), /ResourceClaimTemplate 'shardd-gpu', which is not deployed/));
  });
  test("the shared volume is not in memory or the socket is elsewhere", () => {
    const objects = render("base");
    trainerOf(objects).spec.template.spec.volumes[0].emptyDir = {};
    trainerContainerOf(objects).args[0] = "--socket=/tmp/shardd.sock";
    const errors = v.checkSidecar(objects);
    assert.ok(some(errors, /medium: Memory/), errors.join("\n"));
    assert.ok(some(errors, /--socket/), errors.join("\n"));
  });
});

describe("restricted securityContext check fails when", () => {
  for (const [what, mutate, pattern] of [
    ["privilege escalation is allowed", (c) => { c.securityContext.allowPrivilegeEscalation = true; }, /allowPrivilegeEscalation/],
    ["capabilities are not dropped", (c) => { c.securityContext.capabilities.drop = []; }, /drop must include ALL/],
    ["the root filesystem is writable", (c) => { delete c.securityContext.readOnlyRootFilesystem; }, /readOnlyRootFilesystem/],
    ["the container may run as root", (c) => { c.securityContext.runAsUser = 0; }, /runAsUser must not be 0/],
    ["a capability is added", (c) => { c.securityContext.capabilities.add = ["SYS_ADMIN"]; }, /SYS_ADMIN/],
    ["no memory limit is set", (c) => { delete c.resources.limits.memory; }, /limit memory/],
  ]) {
    test(what, () => {
      const objects = render("base");
      mutate(trainerContainerOf(objects));
      assert.ok(some(v.checkRestricted(objects), pattern));
    });
  }
  test("the pod drops runAsNonRoot and seccomp", () => {
    const objects = render("base");
    const pod = trainerOf(objects).spec.template.spec;
    delete pod.securityContext.runAsNonRoot;
    delete pod.securityContext.seccompProfile;
    for (const c of [...pod.initContainers, ...pod.containers]) {
      delete c.securityContext.runAsNonRoot;
      delete c.securityContext.seccompProfile;
    }
    const errors = v.checkRestricted(objects);
    assert.ok(some(errors, /runAsNonRoot must be true/));
    assert.ok(some(errors, /seccompProfile/));
  });
});

describe("probe checks fail when", () => {
  test("liveness asks what readiness asks", () => {
    const objects = render("base");
    sidecarOf(objects).livenessProbe = structuredClone(sidecarOf(objects).readinessProbe);
    assert.ok(some(v.checkProbes(objects), /livenessProbe must not ask what readinessProbe asks/));
  });
  test("a probe is missing or not gRPC, or on an undeclared port", () => {
    const objects = render("base");
    delete sidecarOf(objects).startupProbe;
    sidecarOf(objects).readinessProbe.grpc.port = 7999;
    const errors = v.checkProbes(objects);
    assert.ok(some(errors, /startupProbe must be a gRPC health probe/), errors.join("\n"));
    assert.ok(some(errors, /7999 is not a declared containerPort/), errors.join("\n"));
  });
});

describe("job checks fail when", () => {
  test("replicas differ from W, or F does not divide W", () => {
    const objects = render("base");
    trainerOf(objects).spec.replicas = 3;
    objects.find((o) => o.kind === "ConfigMap").data.SHARDING_FACTOR = "3";
    const errors = v.checkJob(objects);
    assert.ok(some(errors, /replicas \(3\) must equal WORLD_SIZE \(4\)/), errors.join("\n"));
    assert.ok(some(errors, /SHARDING_FACTOR \(3\) must divide WORLD_SIZE \(4\)/), errors.join("\n"));
  });
  test("pods start in order, or the peers Service hides unready pods", () => {
    const objects = render("base");
    trainerOf(objects).spec.podManagementPolicy = "OrderedReady";
    objects.find((o) => o.metadata.name === "shardd-peers").spec.publishNotReadyAddresses = false;
    const errors = v.checkJob(objects);
    assert.ok(some(errors, /podManagementPolicy must be Parallel/), errors.join("\n"));
    assert.ok(some(errors, /publishNotReadyAddresses/), errors.join("\n"));
  });
  test("the daemons name another coordinator address, or metrics ports disagree", () => {
    const objects = render("base");
    sidecarOf(objects).args[0] = "--coordinator=coordinator:7070";
    sidecarOf(objects).args = sidecarOf(objects).args.map((a) => (a.startsWith("--metrics_port") ? "--metrics_port=9100" : a));
    const errors = v.checkJob(objects);
    assert.ok(some(errors, /--coordinator \(coordinator:7070\)/), errors.join("\n"));
    assert.ok(some(errors, /--metrics_port \(9100\)/), errors.join("\n"));
  });
  test("the monitors select nothing", () => {
    const objects = render("base");
    objects.find((o) => o.kind === "PodMonitor").spec.podMetricsEndpoints[0].port = "prom";
    objects.find((o) => o.kind === "ServiceMonitor").spec.selector.matchLabels = { app: "other" };
    const errors = v.checkJob(objects);
    assert.ok(some(errors, /port 'prom' is not a named port/), errors.join("\n"));
    assert.ok(some(errors, /selector does not match Service shardd-coordinator/), errors.join("\n"));
  });
  test("the daemons' series get no rank label, or one from another field than --rank", () => {
    const objects = render("base");
    const pm = objects.find((o) => o.kind === "PodMonitor");
    assert.deepEqual(pm.spec.podMetricsEndpoints[0].relabelings, [
      { sourceLabels: ["__meta_kubernetes_pod_label_apps_kubernetes_io_pod_index"], targetLabel: "rank", action: "replace" },
    ]);
    delete pm.spec.podMetricsEndpoints[0].relabelings;
    assert.ok(some(v.checkJob(objects), /PodMonitor.*endpoint 'metrics' needs one relabeling \{sourceLabels: \[__meta_kubernetes_pod_label_apps_kubernetes_io_pod_index\], targetLabel: rank\}/), v.checkJob(objects).join("\n"));
    const moved = render("base");
    moved.find((o) => o.kind === "PodMonitor").spec.podMetricsEndpoints[0].relabelings[0].regex = "(\\d)";
    assert.ok(some(v.checkJob(moved), /needs one relabeling/));
    // --rank from the pod's name: nothing a relabeling could copy.
    const byName = render("base");
    sidecarOf(byName).env.find((e) => e.name === "POD_INDEX").valueFrom.fieldRef.fieldPath = "metadata.name";
    assert.ok(some(v.checkJob(byName), /--rank \(\$\(POD_INDEX\)\) is no pod label or annotation/), v.checkJob(byName).join("\n"));
    assert.equal(v.podMetaLabel("metadata.annotations['batch.kubernetes.io/job-completion-index']"), "__meta_kubernetes_pod_annotation_batch_kubernetes_io_job_completion_index");
  });
  test("the stall time is no duration the coordinator parses", () => {
    assert.deepEqual(v.checkStallAlertAfter(render("base"), coordinatorOf(render("base")), "c"), []);
    const objects = render("base");
    objects.find((o) => o.kind === "ConfigMap").data.STALL_ALERT_AFTER = "15 minutes";
    assert.ok(some(v.checkJob(objects), /--stall_alert_after '15 minutes' is no duration/), v.checkJob(objects).join("\n"));
    objects.find((o) => o.kind === "ConfigMap").data.STALL_ALERT_AFTER = "0";
    assert.ok(!some(v.checkJob(objects), /stall_alert_after/));
    const jobset = render("jobset-cpu");
    delete jobset.find((o) => o.kind === "ConfigMap").data.STALL_ALERT_AFTER;
    assert.ok(some(v.checkJob(jobset), /STALL_ALERT_AFTER is not a key of a deployed ConfigMap/), v.checkJob(jobset).join("\n"));
  });
  test("SharddMemberMissing waits no longer than the lease", () => {
    const objects = render("base");
    objects.find((o) => o.kind === "ConfigMap").data.LEASE_MS = "60000";
    assert.ok(some(v.checkJob(objects), /SharddMemberMissing 'for' \(1m\) must be longer than the lease/));
  });
  test("an overlay image has no registry or tag", () => {
    assert.ok(some(v.checkImagesPinned(render("base")), /image 'shardd' must name a registry/));
  });
});

describe("alert rules", () => {
  test("a PrometheusRule that differs from alerts.yml is an error", () => {
    const objects = render("base");
    objects.find((o) => o.kind === "PrometheusRule").spec.groups[0].rules[0].expr = "vector(1)";
    assert.ok(some(v.checkRules(objects), /differ from deploy\/prometheus\/alerts.yml/));
  });
  test("every rule selects only exported metrics", () => {
    const names = v.alertRuleGroups().flatMap((g) => g.rules).flatMap((r) => v.promqlMetricNames(r.expr)).sort();
    assert.deepEqual([...new Set(names)], [
      "shardd_accept_shortages_open",
      "shardd_checkpoint_write_failures_total",
      "shardd_checkpoints_skipped_total",
      "shardd_coordinator_broken_peer_links",
      "shardd_coordinator_job_failed",
      "shardd_coordinator_last_step_timestamp_seconds",
      "shardd_coordinator_members_expected",
      "shardd_coordinator_members_live",
      "shardd_coordinator_recovery_seconds_count",
      "shardd_coordinator_recovery_seconds_sum",
      "shardd_coordinator_shards_without_replica",
      "shardd_coordinator_stall_alert_after_seconds",
      "shardd_shm_leftover_bytes",
    ]);
  });
  test("durations parse", () => {
    assert.equal(v.parseDuration("1m30s"), 90);
    assert.throws(() => v.parseDuration("1 minute"));
  });
});

describe("metric names", () => {
  test("exported_metrics.txt lists every metric of docs/metrics.md and only prometheus-cpp's exposer_* besides", () => {
    assert.deepEqual(v.checkExportedList(), []);
    const types = v.metricTypes();
    assert.equal(types.get("shardd_collective_duration_seconds"), "histogram");
    assert.equal(types.get("shardd_coordinator_recovery_duration_seconds"), "histogram");
    assert.equal(types.get("process_cpu_seconds_total"), "counter");
    assert.equal(types.get("process_open_fds"), "gauge");
    assert.ok(!types.has("process_exited"), "a label value of docs/metrics.md is not a metric");
  });
  test("PromQL: functions, keywords, labels, ranges, numbers and variables are not metric names", () => {
    assert.deepEqual(v.promqlMetricNames('histogram_quantile(0.9, sum by (le, op) (rate(a_bucket{op="x",le!="1"}[$__rate_interval])))'), ["a_bucket"]);
    assert.deepEqual(v.promqlMetricNames("a / on(job) group_left(pod) b offset 5m > bool 1e3"), ["a", "b"]);
    assert.deepEqual(v.promqlMetricNames('increase(c_sum{phase="total"}[15m]) / increase(c_count[15m]) > 60'), ["c_sum", "c_count"]);
    assert.deepEqual(v.promqlMetricNames("max(x:recorded{namespace=~\"$namespace\"}) without (instance)"), ["x:recorded"]);
  });
});

describe("dashboard", () => {
  test("parses, every panel has a query, every query names exported metrics, every required view is there", () => {
    assert.deepEqual(v.checkDashboard(), []);
  });
  test("has panels for job state, failures, recovery phases, epoch, members, committed step, step duration, collectives, memory", () => {
    const dashboard = JSON.parse(fs.readFileSync(path.join(v.DEPLOY, "grafana/shardd-dashboard.json"), "utf8"));
    const titles = dashboard.panels.map((p) => p.title.toLowerCase()).join("\n");
    for (const word of ["job state", "failures", "recovery duration by phase", "epoch", "live", "committed step", "step duration", "collective latency", "memory by kind"]) {
      assert.ok(titles.includes(word), word);
    }
  });
  test("an unknown metric, an empty panel, or invalid JSON is an error", () => {
    const dir = tmpDir();
    const file = path.join(dir, "d.json");
    const dashboard = JSON.parse(fs.readFileSync(path.join(v.DEPLOY, "grafana/shardd-dashboard.json"), "utf8"));
    dashboard.panels.push({ type: "timeseries", title: "bogus", targets: [{ refId: "A", expr: "rate(shardd_bogus_total[5m])" }] });
    dashboard.panels.push({ type: "stat", title: "empty", targets: [] });
    fs.writeFileSync(file, JSON.stringify(dashboard));
    const errors = v.checkDashboard(file);
    assert.ok(some(errors, /'shardd_bogus_total' is not an exported metric/), errors.join("\n"));
    assert.ok(some(errors, /panel 'empty' has no query/), errors.join("\n"));
    fs.writeFileSync(file, "{");
    assert.equal(v.checkDashboard(file).length, 1);
  });
  test("GPU exporter metrics: the documented names pass, any other DCGM_ name is an error", () => {
    const allowed = v.dcgmMetrics();
    for (const n of ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"]) assert.ok(allowed.includes(n), n);
    assert.ok(allowed.every((n) => /^DCGM_FI_(DEV|PROF)_[A-Z0-9_]+$/.test(n)), allowed.join(" "));
    const dir = tmpDir();
    const file = path.join(dir, "d.json");
    const dashboard = JSON.parse(fs.readFileSync(path.join(v.DEPLOY, "grafana/shardd-dashboard.json"), "utf8"));
    dashboard.panels.push({ type: "timeseries", title: "power", targets: [{ refId: "A", expr: "max by (exported_pod) (DCGM_FI_DEV_POWER_USAGE)" }] });
    fs.writeFileSync(file, JSON.stringify(dashboard));
    assert.deepEqual(v.checkDashboard(file), []);
    dashboard.panels.push({ type: "timeseries", title: "typo", targets: [{ refId: "A", expr: "DCGM_FI_DEV_GPU_UTILISATION" }] });
    fs.writeFileSync(file, JSON.stringify(dashboard));
    assert.ok(some(v.checkDashboard(file), /panel 'typo' target A: 'DCGM_FI_DEV_GPU_UTILISATION' is not an exported metric/));
  });
  test("per-rank panels, the rank state timeline and the epoch annotations are required", () => {
    const dir = tmpDir();
    const file = path.join(dir, "d.json");
    const dashboard = JSON.parse(fs.readFileSync(path.join(v.DEPLOY, "grafana/shardd-dashboard.json"), "utf8"));
    const titles = dashboard.panels.map((p) => p.title);
    for (const t of ["Rank state (recovery timeline)", "Step time by rank", "Trainer wait per step by rank", "Memory against plan, by rank", "GPU utilisation by rank", "GPU memory against plan, by rank"]) assert.ok(titles.includes(t), t);
    assert.equal(dashboard.panels.find((p) => p.title === "Rank state (recovery timeline)").type, "state-timeline");
    // Aggregated over the ranks instead of by rank; no epoch annotation.
    for (const p of dashboard.panels) for (const t of p.targets ?? []) t.expr = t.expr.replace(/by \(namespace, rank(, call)?\)/g, "by (namespace)");
    dashboard.annotations.list = [];
    fs.writeFileSync(file, JSON.stringify(dashboard));
    const errors = v.checkDashboard(file);
    for (const what of ["rank state", "step time", "trainer wait", "memory against plan"]) {
      assert.ok(some(errors, new RegExp(`no panel shows ${what} per rank`)), `${what}\n${errors.join("\n")}`);
    }
    assert.ok(some(errors, /no annotation marks the membership epoch changes/), errors.join("\n"));
  });
  test("every metric an alert fires on is on a panel", () => {
    assert.deepEqual(v.checkAlertsOnDashboard(), []);
  });
  test("the alerts check fails when no panel shows an alert's metric", () => {
    const dashboard = JSON.parse(fs.readFileSync(path.join(v.DEPLOY, "grafana/shardd-dashboard.json"), "utf8"));
    dashboard.panels = dashboard.panels.filter((p) => !(p.targets ?? []).some((t) => /stall_alert_after/.test(t.expr)));
    const file = path.join(tmpDir(), "dashboard.json");
    fs.writeFileSync(file, JSON.stringify(dashboard));
    assert.ok(some(v.checkAlertsOnDashboard(file), /alert SharddTrainingStalled fires on 'shardd_coordinator_stall_alert_after_seconds', which no panel shows/));
    const groups = [{ name: "g", rules: [{ alert: "X", expr: "shardd_not_on_the_dashboard > 0" }] }];
    assert.ok(some(v.checkAlertsOnDashboard(undefined, groups), /alert X fires on 'shardd_not_on_the_dashboard'/));
  });
  test("the checkpoint age is the oldest daemon's, how far back a rollback would go", () => {
    const dashboard = JSON.parse(fs.readFileSync(path.join(v.DEPLOY, "grafana/shardd-dashboard.json"), "utf8"));
    const age = dashboard.panels.find((p) => p.title === "Checkpoint age");
    assert.match(age.targets[0].expr, /^time\(\) - min\(shardd_checkpoint_last_written_timestamp_seconds\{/);
  });
  test("the epoch annotation's query is checked like a panel's", () => {
    const dashboard = JSON.parse(fs.readFileSync(path.join(v.DEPLOY, "grafana/shardd-dashboard.json"), "utf8"));
    const q = v.dashboardQueries(dashboard).find((x) => x.where.startsWith("annotation"));
    assert.ok(q && v.promqlMetricNames(q.expr).includes("shardd_coordinator_membership_epoch"));
  });
});

test("validate.mjs check passes on the repository", async () => {
  assert.deepEqual(await v.checkAll(), []);
});

// ---------------------------------------------------------------------------
// The JobSet form (deploy/k8s/jobset and its overlays), several jobs per
// namespace (deploy/k8s/examples/two-jobs), GPU variants.

const JOBSET_FORMS = ["jobset", "jobset-cpu", "jobset-gpu-dra", "jobset-gpu-device-plugin", "jobset-tls", "two-jobs/job-a", "two-jobs/job-b"];
const jobSetOf = (objects) => objects.find((o) => o.kind === "JobSet");
const rjOf = (objects, name) => jobSetOf(objects).spec.replicatedJobs.find((r) => r.name === name);
const workerPod = (objects) => rjOf(objects, "workers").template.spec.template.spec;
const workerContainer = (objects, name) => [...workerPod(objects).initContainers, ...workerPod(objects).containers].find((c) => c.name === name);

for (const name of JOBSET_FORMS) {
  describe(`kustomization ${name} (JobSet form)`, () => {
    test("renders a JobSet, the job's ConfigMap, rules, NetworkPolicies and two PodMonitors, and no StatefulSet or Deployment", () => {
      const kinds = render(name).map((o) => o.kind).sort();
      const gpu = name === "jobset-gpu-dra" ? ["ResourceClaimTemplate"] : [];
      const tls = name === "jobset-tls" ? ["Certificate", "Certificate", "Issuer", "Issuer"] : [];
      assert.deepEqual(kinds, ["ConfigMap", "JobSet", "NetworkPolicy", "NetworkPolicy", "NetworkPolicy", "PodMonitor", "PodMonitor", "PrometheusRule", ...gpu, ...tls].sort());
    });
    test("every object validates (the JobSet against its CRD, each replicatedJob as a batch/v1 Job), no unknown field", async () => {
      assert.deepEqual(await v.validateSchemas(render(name)), []);
    });
    for (const [what, check] of [["sidecar", "checkSidecar"], ["restricted", "checkRestricted"], ["probes", "checkProbes"], ["TLS", "checkTls"],
      ["job shape, exit codes, success and failure policies", "checkJob"], ["rules", "checkRules"], ["NetworkPolicies", "checkNetworkPolicies"], ["--insecure", "checkInsecure"],
      ["certificates", "checkCertificates"]]) {
      test(`${what} (${check})`, () => assert.deepEqual(v[check](render(name)), []));
    }
    if (name !== "jobset") test("images pinned", () => assert.deepEqual(v.checkImagesPinned(render(name)), []));
  });
}

describe("JobSet form", () => {
  test("the completion index is the rank of shardd and of the trainer; the coordinator comes from the JobSet's annotation", () => {
    const objects = render("jobset-cpu");
    for (const c of [workerContainer(objects, "shardd"), workerContainer(objects, "trainer")]) {
      assert.equal(v.flag(c, "rank"), "$(RANK)", c.name);
      assert.equal(c.env.find((e) => e.name === "RANK").valueFrom.fieldRef.fieldPath, "metadata.annotations['batch.kubernetes.io/job-completion-index']");
    }
    assert.equal(v.flag(workerContainer(objects, "shardd"), "coordinator"), "$(COORDINATOR):7070");
    assert.deepEqual(jobSetOf(objects).spec.coordinator, { replicatedJob: "coordinator", jobIndex: 0, podIndex: 0 });
  });
  test("the terminal exit statuses fail the Jobs at once and the JobSet without a restart; a disruption is ignored", () => {
    const objects = render("jobset");
    const rules = rjOf(objects, "workers").template.spec.podFailurePolicy.rules;
    assert.deepEqual(rules.slice(0, 2).map((r) => [r.action, r.onExitCodes.containerName, r.onExitCodes.values]), [["FailJob", "trainer", [2, 3]], ["FailJob", "shardd", [3]]]);
    assert.deepEqual(rules[2], { action: "Ignore", onPodConditions: [{ type: "DisruptionTarget" }] });
    assert.deepEqual(rjOf(objects, "coordinator").template.spec.podFailurePolicy.rules[0].onExitCodes, { containerName: "coordinator", operator: "In", values: [3] });
    assert.deepEqual(jobSetOf(objects).spec.failurePolicy.rules, [{ name: "job-failed", action: "FailJobSet", onJobFailureReasons: ["PodFailurePolicy"] }]);
    assert.deepEqual(jobSetOf(objects).spec.successPolicy, { operator: "All", targetReplicatedJobs: ["workers"] });
  });
  test("the exit codes it fails on are daemon/core/exit_status.h's kExitJobFailed and train_gpt.py's and quickstart.py's on JobFailed", () => {
    assert.deepEqual(v.checkExitStatuses(), []);
  });
  test("the exit-code check fails when the header or a JobFailed handler of the Python trainer exits otherwise", () => {
    const dir = tmpDir();
    const header = path.join(dir, "exit_status.h");
    const trainer = path.join(dir, "train.py");
    const python = (body) => `def main():\n    try:\n        step()\n    except JobFailed as e:\n${body}\n    return 0\n`;
    fs.writeFileSync(header, "inline constexpr int kExitJobFailed = 4;\n");
    fs.writeFileSync(trainer, python("        print(e)\n        return 2"));
    assert.ok(some(v.checkExitStatuses(header, trainer), /kExitJobFailed is 4, the podFailurePolicy's EXIT_JOB_FAILED 3/));
    fs.writeFileSync(header, "inline constexpr int kExitJobFailed = 3;\n");
    assert.deepEqual(v.checkExitStatuses(header, trainer), []);
    fs.writeFileSync(trainer, python("        sys.exit(1)"));
    assert.ok(some(v.checkExitStatuses(header, trainer), /train\.py:4: JobFailed exits 1/));
    fs.writeFileSync(trainer, python("        print(e)"));
    assert.ok(some(v.checkExitStatuses(header, trainer), /train\.py:4: an except JobFailed that neither returns nor sys.exit\(\)s a status/));
    fs.writeFileSync(trainer, "def main():\n    return 0\n");
    assert.ok(some(v.checkExitStatuses(header, trainer), /no except JobFailed handler/));
    // Each of a list is checked: the README's quickstart as it was (a
    // JobFailed escaped it: exit 1) fails while train_gpt.py passes.
    fs.writeFileSync(trainer, python("        return 2"));
    const quickstart = path.join(dir, "quickstart.py");
    fs.writeFileSync(quickstart, "while True:\n    try:\n        step()\n    except StepAborted:\n        recover()\n");
    const errors = v.checkExitStatuses(header, [trainer, quickstart]);
    assert.deepEqual(errors, [`${quickstart}: no except JobFailed handler`]);
  });
  for (const [what, mutate, pattern] of [
    ["the workers do not fail on the trainer's exit 3", (o) => { rjOf(o, "workers").template.spec.podFailurePolicy.rules[0].onExitCodes.values = [2]; }, /FailJob on the trainer's exit codes 3 and 2/],
    ["the coordinator's exit 3 is retried", (o) => { rjOf(o, "coordinator").template.spec.podFailurePolicy.rules.shift(); }, /FailJob on the coordinator's exit code 3/],
    ["the JobSet restarts on the job's failure", (o) => { jobSetOf(o).spec.failurePolicy.rules[0].action = "RestartJobSet"; }, /FailJobSet rule on PodFailurePolicy/],
    ["completions differ from W", (o) => { rjOf(o, "workers").template.spec.completions = 3; }, /completions \(3\) and parallelism \(4\) must be 4/],
    ["the workers are not Indexed", (o) => { rjOf(o, "workers").template.spec.completionMode = "NonIndexed"; }, /completionMode must be Indexed/],
    ["the pods restart in place", (o) => { workerPod(o).restartPolicy = "OnFailure"; }, /restartPolicy must be Never/],
    ["success waits for the coordinator", (o) => { jobSetOf(o).spec.successPolicy.targetReplicatedJobs = ["workers", "coordinator"]; }, /successPolicy must be operator All over targetReplicatedJobs \[workers\]/],
    ["a rank's retries are unbounded", (o) => { delete rjOf(o, "workers").template.spec.maxFailedIndexes; }, /maxFailedIndexes must be 0/],
    ["the daemons name the coordinator by a fixed name", (o) => { workerContainer(o, "shardd").args[0] = "--coordinator=shardd-coordinator:7070"; }, /must be \$\(VAR\):7070/],
    ["the rank is not the completion index", (o) => { workerContainer(o, "trainer").env.find((e) => e.name === "RANK").valueFrom.fieldRef.fieldPath = "metadata.name"; }, /container trainer --rank .* must be the pod's completion index/],
    ["an env var reads a ConfigMap that is not deployed", (o) => { workerContainer(o, "trainer").env.find((e) => e.name === "STRATEGY").valueFrom.configMapKeyRef.name = "other"; }, /env STRATEGY reads ConfigMap 'other', which is not deployed/],
    ["no PodMonitor selects the coordinator", (o) => { o.find((x) => x.kind === "PodMonitor" && /coordinator/.test(x.metadata.name)).spec.selector.matchLabels["app.kubernetes.io/name"] = "x"; }, /no PodMonitor selects the coordinator pods/],
    ["the rank label comes from another field than --rank", (o) => { o.find((x) => x.kind === "PodMonitor" && x.metadata.name.endsWith("shardd")).spec.podMetricsEndpoints[0].relabelings[0].sourceLabels = ["__meta_kubernetes_pod_label_batch_kubernetes_io_job_completion_index"]; }, /needs one relabeling \{sourceLabels: \[__meta_kubernetes_pod_annotation_batch_kubernetes_io_job_completion_index\], targetLabel: rank\}/],
  ]) {
    test(`checkJob fails when ${what}`, () => {
      const objects = render("jobset-cpu");
      mutate(objects);
      const errors = v.checkJob(objects);
      assert.ok(some(errors, pattern), errors.join("\n"));
    });
  }
  test("the CRD schema refuses a misspelt field, a wrong enum, a wrong type, and a missing required field", async () => {
    const objects = render("jobset");
    const js = jobSetOf(objects);
    js.spec.succesPolicy = {};
    js.spec.failurePolicy.rules[0].action = "Explode";
    delete js.spec.failurePolicy.rules[0].name;
    rjOf(objects, "workers").template.spec.completions = "four";
    workerContainer(objects, "shardd").restartpolicy = "Always";
    const errors = await v.validateSchemas(objects);
    for (const p of [/JobSet\/shardd.spec: unknown field 'succesPolicy'/, /rules\[0\].action: "Explode" is not one of FailJobSet/, /rules\[0\]: 'name' is required/,
      /completions: must be integer/, /initContainers\[0\]: unknown field 'restartpolicy'/, /replicatedJob shardd-workers-0: .*unknown field 'restartpolicy'/]) {
      assert.ok(some(errors, p), `${p}\n${errors.join("\n")}`);
    }
  });
});

describe("GPU variants", () => {
  test("CPU: no claim, no GPU request, --device=cpu", () => {
    const objects = render("jobset-cpu");
    assert.equal(workerPod(objects).resourceClaims, undefined);
    for (const c of [workerContainer(objects, "shardd"), workerContainer(objects, "trainer")]) {
      assert.equal(c.resources.claims, undefined, c.name);
      assert.ok(!Object.keys(c.resources.limits).some((k) => k.endsWith("/gpu")), c.name);
    }
    assert.equal(v.flag(workerContainer(objects, "shardd"), "device"), "cpu");
  });
  test("DRA: one claim per pod from the deployed template, referenced by both containers; CUDA image", () => {
    const objects = render("jobset-gpu-dra");
    assert.deepEqual(workerPod(objects).resourceClaims, [{ name: "gpu", resourceClaimTemplateName: "shardd-gpu" }]);
    for (const c of ["shardd", "trainer"]) assert.deepEqual(workerContainer(objects, c).resources.claims, [{ name: "gpu" }], c);
    assert.equal(workerContainer(objects, "shardd").image, "registry.example.com/shardd/shardd-cuda:0.1.0");
    assert.ok(objects.some((o) => o.kind === "ResourceClaimTemplate" && o.metadata.name === "shardd-gpu"));
  });
  test("DRA checks fail when the trainer references another claim, or the template is missing", () => {
    const objects = render("jobset-gpu-dra").filter((o) => o.kind !== "ResourceClaimTemplate");
    workerContainer(objects, "trainer").resources.claims = [{ name: "other" }];
    const errors = v.checkSidecar(objects);
    assert.ok(some(errors, /must reference the same resource claim/), errors.join("\n"));
    assert.ok(some(errors, /ResourceClaimTemplate 'shardd-gpu', which is not deployed/), errors.join("\n"));
  });
  test("device plugin: shardd holds nvidia.com/gpu: 1 and publishes its device, the trainer selects it", () => {
    const objects = render("jobset-gpu-device-plugin");
    const shardd = workerContainer(objects, "shardd");
    const trainer = workerContainer(objects, "trainer");
    assert.equal(shardd.resources.limits["nvidia.com/gpu"], 1);
    assert.equal(trainer.resources.limits["nvidia.com/gpu"], undefined);
    assert.equal(shardd.command[0], "/bin/sh");
    assert.ok(shardd.command[2].endsWith('exec /usr/local/bin/shardd "$@"'));
    assert.equal(v.flag(shardd, "coordinator"), "$(COORDINATOR):7070", "the args stay");
    assert.deepEqual(trainer.env.at(-1), { name: "NVIDIA_VISIBLE_DEVICES", value: "all" });
  });
  test("device-plugin checks fail when both containers ask for a GPU, or the trainer does not select shardd's", () => {
    let objects = render("jobset-gpu-device-plugin");
    workerContainer(objects, "trainer").resources.limits["nvidia.com/gpu"] = 1;
    assert.ok(some(v.checkSidecar(objects), /shardd and trainer each ask for a device-plugin GPU/));
    objects = render("jobset-gpu-device-plugin");
    workerContainer(objects, "trainer").command = ["/usr/local/bin/example_trainer"];
    assert.ok(some(v.checkSidecar(objects), /the trainer must set CUDA_VISIBLE_DEVICES from \/run\/shardd\/gpu-uuid/));
  });
});

// Objects of several renders side by side in one namespace: no two share a
// kind and name (the JobSet's headless Service, named after the JobSet,
// included), and every reference stays inside its own job: ConfigMaps and
// claim templates named in the pods, the pods each selector selects
// (NetworkPolicy pod and peer selectors, PodMonitors).
export function crossJobErrors(jobs) {
  const errors = [];
  const seen = new Map();
  const ownedNames = (objects) => [...objects.map((o) => [o.kind, o.metadata.namespace, o.metadata.name]),
    ...objects.filter((o) => o.kind === "JobSet").map((o) => ["Service", o.metadata.namespace, o.spec.network?.subdomain ?? o.metadata.name])];
  for (const [job, objects] of Object.entries(jobs)) {
    for (const [kind, ns, name] of ownedNames(objects)) {
      const key = `${kind}/${ns}/${name}`;
      if (seen.has(key)) errors.push(`${key}: in ${seen.get(key)} and in ${job}`);
      seen.set(key, job);
    }
  }
  const templates = Object.entries(jobs).flatMap(([job, objects]) => objects.flatMap(v.podTemplates).map((t) => ({ ...t, job })));
  for (const [job, objects] of Object.entries(jobs)) {
    const mine = (kind, name) => objects.some((o) => o.kind === kind && o.metadata.name === name);
    for (const t of templates.filter((x) => x.job === job)) {
      for (const c of [...(t.spec.initContainers ?? []), ...(t.spec.containers ?? [])]) {
        for (const e of c.env ?? []) {
          const ref = e.valueFrom?.configMapKeyRef?.name;
          if (ref && !mine("ConfigMap", ref)) errors.push(`${job}: ${t.id} ${c.name} env ${e.name}: ConfigMap ${ref} is not this job's`);
        }
      }
      for (const rc of t.spec.resourceClaims ?? []) {
        if (rc.resourceClaimTemplateName && !mine("ResourceClaimTemplate", rc.resourceClaimTemplateName)) errors.push(`${job}: ${t.id}: ResourceClaimTemplate ${rc.resourceClaimTemplateName} is not this job's`);
      }
    }
    const selectors = [];
    for (const o of objects) {
      if (o.kind === "NetworkPolicy") {
        selectors.push([o, "podSelector", o.spec.podSelector]);
        for (const r of o.spec.ingress ?? []) for (const f of r.from ?? []) if (f.podSelector && !f.namespaceSelector) selectors.push([o, "from.podSelector", f.podSelector]);
      }
      if (o.kind === "PodMonitor" || o.kind === "ServiceMonitor") selectors.push([o, "selector", o.spec.selector]);
    }
    for (const [o, where, sel] of selectors) {
      const selected = templates.filter((t) => v.selectorMatches(sel, t.labels));
      if (selected.length === 0) errors.push(`${job}: ${o.kind}/${o.metadata.name} ${where} selects no pod`);
      for (const t of selected.filter((x) => x.job !== job)) errors.push(`${job}: ${o.kind}/${o.metadata.name} ${where} also selects ${t.job}'s ${t.id}`);
    }
  }
  return errors;
}

describe("two jobs in one namespace (examples/two-jobs)", () => {
  const both = () => ({ "job-a": render("two-jobs/job-a"), "job-b": render("two-jobs/job-b") });
  test("share namespace ml-training, every name prefixed, W = 4 and W = 2", () => {
    const jobs = both();
    for (const [job, objects] of Object.entries(jobs)) {
      for (const o of objects) {
        assert.equal(o.metadata.namespace, "ml-training");
        assert.ok(o.metadata.name.startsWith(`${job}-`), `${o.kind}/${o.metadata.name}`);
        assert.equal(o.metadata.labels["app.kubernetes.io/instance"], job, `${o.kind}/${o.metadata.name}`);
      }
    }
    assert.equal(rjOf(jobs["job-a"], "workers").template.spec.completions, 4);
    assert.equal(rjOf(jobs["job-b"], "workers").template.spec.completions, 2);
    assert.equal(jobs["job-b"].find((o) => o.kind === "ConfigMap").data.WORLD_SIZE, "2");
  });
  test("no name clashes; every reference and selector resolves within its own job", () => {
    assert.deepEqual(crossJobErrors(both()), []);
  });
  test("the prefix reaches the ConfigMap references and the labels the JobSet's pod templates and the monitors", () => {
    const objects = render("two-jobs/job-a");
    assert.equal(workerContainer(objects, "trainer").env.find((e) => e.name === "WORLD_SIZE").valueFrom.configMapKeyRef.name, "job-a-shardd-job");
    assert.equal(rjOf(objects, "workers").template.spec.template.metadata.labels["app.kubernetes.io/instance"], "job-a");
    for (const pm of objects.filter((o) => o.kind === "PodMonitor")) assert.equal(pm.spec.selector.matchLabels["app.kubernetes.io/instance"], "job-a");
  });
  test("the cross-job check fails on a clash, a foreign ConfigMap and a selector that reaches the other job", () => {
    const jobs = both();
    jobs["job-b"].find((o) => o.kind === "ConfigMap").metadata.name = "job-a-shardd-job";
    workerContainer(jobs["job-a"], "shardd").env.find((e) => e.name === "COLLECTIVE_TIMEOUT_MS").valueFrom.configMapKeyRef.name = "job-b-shardd-job";
    delete jobs["job-a"].find((o) => o.kind === "NetworkPolicy" && o.metadata.name === "job-a-shardd-trainer").spec.podSelector.matchLabels["app.kubernetes.io/instance"];
    jobs["job-b"].find((o) => o.kind === "JobSet").metadata.name = "job-a-shardd";
    const errors = crossJobErrors(jobs);
    for (const p of [/ConfigMap\/ml-training\/job-a-shardd-job: in job-a and in job-b/, /Service\/ml-training\/job-a-shardd: in job-a and in job-b/,
      /job-a: .* shardd env COLLECTIVE_TIMEOUT_MS: ConfigMap job-b-shardd-job is not this job's/,
      /job-a: NetworkPolicy\/job-a-shardd-trainer podSelector also selects job-b's/]) {
      assert.ok(some(errors, p), `${p}\n${errors.join("\n")}`);
    }
  });
});

describe("renderer: namePrefix, labels, configMapGenerator, configurations, JSON 6902", () => {
  const write = (dir, files) => { for (const [f, text] of Object.entries(files)) { fs.mkdirSync(path.dirname(path.join(dir, f)), { recursive: true }); fs.writeFileSync(path.join(dir, f), text); } };
  test("renders what kubectl kustomize v5.5 rendered for the same input (recorded)", () => {
    const dir = tmpDir();
    write(dir, {
      "base/kustomization.yaml": "resources: [r.yaml]\nconfigurations: [c.yaml]\n",
      "base/c.yaml": "nameReference:\n- kind: ConfigMap\n  version: v1\n  fieldSpecs:\n  - {kind: JobSet, group: jobset.x-k8s.io, path: spec/replicatedJobs/template/spec/template/spec/containers/env/valueFrom/configMapKeyRef/name}\ncommonLabels:\n- {kind: JobSet, group: jobset.x-k8s.io, path: spec/replicatedJobs/template/spec/template/metadata/labels, create: true}\n",
      "base/r.yaml": [
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\n",
        "apiVersion: v1\nkind: Service\nmetadata: {name: svc}\nspec: {selector: {app: x}}\n",
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: sts}\nspec:\n  serviceName: svc\n  selector: {matchLabels: {app: x}}\n  template:\n    metadata: {labels: {app: x}}\n    spec:\n      containers: [{name: c, image: i, args: [--svc=svc], env: [{name: A, valueFrom: {configMapKeyRef: {name: cfg, key: A}}}]}]\n      volumes: [{name: v, configMap: {name: cfg}}, {name: s, secret: {secretName: sec}}]\n",
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: np}\nspec:\n  podSelector: {matchExpressions: [{key: app, operator: Exists}]}\n  ingress: [{from: [{podSelector: {matchLabels: {app: x}}}]}]\n",
        "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: js}\nspec:\n  replicatedJobs:\n  - name: w\n    template:\n      spec:\n        template:\n          spec:\n            containers: [{name: c, image: i, env: [{name: A, valueFrom: {configMapKeyRef: {name: cfg, key: A}}}]}]\n",
      ].join("---\n"),
      "ov/kustomization.yaml": "resources: [../base]\nnamePrefix: p-\nlabels:\n- pairs: {inst: p}\n  includeSelectors: true\nconfigMapGenerator:\n- name: gen\n  files: [d.json]\n  literals: [K=V]\n  options: {disableNameSuffixHash: true, labels: {g: \"1\"}}\npatches:\n- path: ops.yaml\n  target: {kind: JobSet, name: js}\n",
      "ov/d.json": "{\"a\": 1}\n",
      "ov/ops.yaml": "- {op: add, path: /spec/replicatedJobs/0/template/spec/completions, value: 2}\n",
    });
    const byName = Object.fromEntries(v.renderKustomization(path.join(dir, "ov")).map((o) => [`${o.kind}/${o.metadata.name}`, o]));
    assert.deepEqual(Object.keys(byName).sort(), ["ConfigMap/p-cfg", "ConfigMap/p-gen", "JobSet/p-js", "NetworkPolicy/p-np", "Service/p-svc", "StatefulSet/p-sts"]);
    assert.deepEqual(byName["ConfigMap/p-gen"], { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "p-gen", labels: { g: "1", inst: "p" } }, data: { "d.json": "{\"a\": 1}\n", K: "V" } });
    const sts = byName["StatefulSet/p-sts"];
    assert.equal(sts.spec.serviceName, "p-svc");
    assert.deepEqual(sts.spec.selector.matchLabels, { app: "x", inst: "p" });
    assert.deepEqual(sts.spec.template.metadata.labels, { app: "x", inst: "p" });
    assert.equal(sts.spec.template.spec.containers[0].env[0].valueFrom.configMapKeyRef.name, "p-cfg");
    assert.deepEqual(sts.spec.template.spec.containers[0].args, ["--svc=svc"], "names inside arguments are not rewritten (kustomize neither)");
    assert.equal(sts.spec.template.spec.volumes[0].configMap.name, "p-cfg");
    assert.equal(sts.spec.template.spec.volumes[1].secret.secretName, "sec", "a Secret that is not deployed keeps its name");
    assert.deepEqual(byName["Service/p-svc"].spec.selector, { app: "x", inst: "p" });
    assert.deepEqual(byName["NetworkPolicy/p-np"].spec.podSelector, { matchExpressions: [{ key: "app", operator: "Exists" }] }, "no matchLabels: none created");
    assert.deepEqual(byName["NetworkPolicy/p-np"].spec.ingress[0].from[0].podSelector.matchLabels, { app: "x", inst: "p" });
    const rj = byName["JobSet/p-js"].spec.replicatedJobs[0];
    assert.equal(rj.template.spec.completions, 2);
    assert.deepEqual(rj.template.spec.template.metadata.labels, { inst: "p" });
    assert.equal(rj.template.spec.template.spec.containers[0].env[0].valueFrom.configMapKeyRef.name, "p-cfg");
  });
  test("refuses a generator with the name hash on, a file outside the directory, and a JSON 6902 path that does not exist", () => {
    const dir = tmpDir();
    write(dir, { "k/kustomization.yaml": "configMapGenerator:\n- name: g\n  literals: [A=1]\n", "k/x.json": "{}" });
    assert.throws(() => v.renderKustomization(path.join(dir, "k")), /disableNameSuffixHash/);
    write(dir, { "k/kustomization.yaml": "configMapGenerator:\n- name: g\n  files: [../y.json]\n  options: {disableNameSuffixHash: true}\n", "y.json": "{}" });
    assert.throws(() => v.renderKustomization(path.join(dir, "k")), /outside the kustomization's directory/);
    const target = { spec: { a: [1] } };
    assert.throws(() => v.applyJson6902(target, [{ op: "replace", path: "/spec/b/c", value: 1 }]), /no such path/);
    assert.throws(() => v.applyJson6902(target, [{ op: "test", path: "/spec/a/0", value: 2 }]), /is 1, not 2/);
    v.applyJson6902(target, [{ op: "add", path: "/spec/a/-", value: 2 }, { op: "add", path: "/spec/x~1y", value: 3 }]);
    assert.deepEqual(target, { spec: { a: [1, 2], "x/y": 3 } });
  });
});

describe("every coordinator passes the job's stall time (checkStallAlertAfter)", () => {
  for (const name of Object.keys(v.KUSTOMIZATIONS)) {
    test(`${name}: --stall_alert_after=$(STALL_ALERT_AFTER)`, () => {
      const objects = render(name);
      const c = v.coordinatorTemplate(objects).spec.containers.find((x) => x.name === "coordinator");
      assert.equal(v.flag(c, "stall_alert_after"), "$(STALL_ALERT_AFTER)");
      assert.deepEqual(v.checkStallAlertAfter(objects, c, "coordinator"), []);
    });
  }
  test("fails on a coordinator that serves /metrics without it", () => {
    const objects = render("jobset-cpu");
    const c = v.coordinatorTemplate(objects).spec.containers.find((x) => x.name === "coordinator");
    c.args = c.args.filter((a) => !a.startsWith("--stall_alert_after="));
    const errors = v.checkStallAlertAfter(objects, c, "coordinator");
    assert.ok(some(errors, /does not pass --stall_alert_after=\$\(STALL_ALERT_AFTER\)/), errors.join("\n"));
  });
});

describe("a failed job's coordinator outlives its report wait (checkFailedReportWait)", () => {
  const coordPod = (objects) => v.coordinatorTemplate(objects).spec;
  const coordContainer = (objects) => coordPod(objects).containers.find((c) => c.name === "coordinator");
  const setFlag = (c, name, value) => {
    c.args = c.args.filter((a) => !a.startsWith(`--${name}=`));
    if (value !== undefined) c.args.push(`--${name}=${value}`);
  };
  for (const name of Object.keys(v.KUSTOMIZATIONS)) {
    test(`${name}: the grace period exceeds --failed_report_wait, which spans two scrapes`, () => {
      const objects = render(name);
      assert.deepEqual(v.checkFailedReportWait(objects), []);
      assert.equal(v.flag(coordContainer(objects), "failed_report_wait"), "60s");
      assert.ok(coordPod(objects).terminationGracePeriodSeconds >= 60 + v.FAILED_REPORT_SHUTDOWN_S);
    });
  }
  for (const name of ["base", "jobset-cpu"]) {
    test(`${name}: fails on Kubernetes' default grace period (30 s) and on a wait the grace period does not cover`, () => {
      let objects = render(name);
      delete coordPod(objects).terminationGracePeriodSeconds;
      let errors = v.checkFailedReportWait(objects);
      assert.ok(some(errors, /terminationGracePeriodSeconds \(unset: 30\) must be at least the coordinator's --failed_report_wait \(60s\) \+ 10 s/), errors.join("\n"));
      objects = render(name);
      setFlag(coordContainer(objects), "failed_report_wait", "1m30s");
      errors = v.checkFailedReportWait(objects);
      assert.ok(some(errors, /terminationGracePeriodSeconds \(90\) must be at least the coordinator's --failed_report_wait \(1m30s\)/), errors.join("\n"));
      // The flag's default is what the binary waits without it.
      objects = render(name);
      setFlag(coordContainer(objects), "failed_report_wait", undefined);
      coordPod(objects).terminationGracePeriodSeconds = 60;
      errors = v.checkFailedReportWait(objects);
      assert.ok(some(errors, /--failed_report_wait \(60s\)/), errors.join("\n"));
    });
    test(`${name}: fails when the wait is shorter than two scrape intervals, or no duration`, () => {
      let objects = render(name);
      setFlag(coordContainer(objects), "failed_report_wait", "20s");
      let errors = v.checkFailedReportWait(objects);
      assert.ok(some(errors, /--failed_report_wait \(20s\) must be at least twice .*'s scrape interval \(15s\)/), errors.join("\n"));
      objects = render(name);
      setFlag(coordContainer(objects), "failed_report_wait", "60");
      errors = v.checkFailedReportWait(objects);
      assert.ok(some(errors, /--failed_report_wait: '60' is not a duration/), errors.join("\n"));
    });
    test(`${name}: nothing to outlast without /metrics or with the wait off`, () => {
      let objects = render(name);
      delete coordPod(objects).terminationGracePeriodSeconds;
      setFlag(coordContainer(objects), "failed_report_wait", "0");
      assert.deepEqual(v.checkFailedReportWait(objects), []);
      objects = render(name);
      delete coordPod(objects).terminationGracePeriodSeconds;
      setFlag(coordContainer(objects), "metrics_port", undefined);
      assert.deepEqual(v.checkFailedReportWait(objects), []);
    });
  }
  test("absl durations as the coordinator parses them", () => {
    assert.equal(v.parseAbslDuration("60s"), 60);
    assert.equal(v.parseAbslDuration("1m30s"), 90);
    assert.equal(v.parseAbslDuration("1.5m"), 90);
    assert.equal(v.parseAbslDuration("0"), 0);
    assert.throws(() => v.parseAbslDuration("60"), /not a duration/);
  });
});

describe("runbooks", () => {
  test("every alert's runbook_url is a heading of deploy/README.md", () => {
    assert.deepEqual(v.checkRunbooks(), []);
    const urls = v.alertRuleGroups().flatMap((g) => g.rules).map((r) => r.annotations.runbook_url);
    assert.equal(urls.length, 10);
    assert.ok(urls.includes("deploy/README.md#sharddcheckpointwritefailing"));
    assert.ok(urls.includes("deploy/README.md#sharddcheckpointsskipped"));
    assert.ok(urls.includes("deploy/README.md#sharddoutoffiledescriptors"));
    assert.ok(urls.includes("deploy/README.md#sharddtrainingstalled"));
  });
  test("fails on a missing annotation and on an anchor the README lacks", () => {
    const groups = v.alertRuleGroups();
    delete groups[0].rules[0].annotations.runbook_url;
    groups[0].rules[1].annotations.runbook_url = "deploy/README.md#no-such-section";
    const errors = v.checkRunbooks(groups);
    assert.ok(some(errors, /SharddRecoverySlow: runbook_url \(undefined\) must be/), errors.join("\n"));
    assert.ok(some(errors, /anchor #no-such-section is no heading/), errors.join("\n"));
  });
  test("anchors as GitHub makes them", () => {
    assert.equal(v.headingAnchor("A failed job"), "a-failed-job");
    assert.equal(v.headingAnchor("Which form: JobSet or StatefulSet?"), "which-form-jobset-or-statefulset");
    assert.equal(v.headingAnchor("SharddJobFailed"), "sharddjobfailed");
  });
});

describe("dashboard ConfigMap (deploy/grafana)", () => {
  test("one ConfigMap in monitoring, label grafana_dashboard: \"1\", data = the dashboard file", async () => {
    assert.deepEqual(await v.checkDashboardConfigMap(), []);
    const [cm] = v.renderKustomization(path.join(v.DEPLOY, "grafana"));
    assert.equal(cm.metadata.namespace, "monitoring");
    assert.equal(cm.data["shardd-dashboard.json"], fs.readFileSync(path.join(v.DEPLOY, "grafana/shardd-dashboard.json"), "utf8"));
  });
  test("fails when the data is not the file or the label is missing", async () => {
    const dir = tmpDir();
    fs.writeFileSync(path.join(dir, "d.json"), "{}");
    fs.writeFileSync(path.join(dir, "kustomization.yaml"), "configMapGenerator:\n- name: x\n  files: [d.json]\n  options: {disableNameSuffixHash: true}\n");
    const errors = await v.checkDashboardConfigMap(dir);
    assert.ok(some(errors, /needs the label grafana_dashboard/), errors.join("\n"));
    assert.ok(some(errors, /data d.json is not .*shardd-dashboard.json/), errors.join("\n"));
  });
});
