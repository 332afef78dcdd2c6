// Offline validation of deploy/: renders the kustomize base and overlays
// without kubectl, validates every object against the Kubernetes and
// Prometheus Operator and cert-manager schemas (npm kubernetes-models,
// @kubernetes-models/prometheus-operator, @kubernetes-models/cert-manager),
// rejects unknown fields, and checks what the schemas cannot: the shardd
// sidecar, the shared GPU claim, the restricted securityContext, the probes,
// mutual TLS (flags, probes on the plaintext health port, certificates from
// a read-only Secret, the cert-manager Certificate naming every dialled
// host), the NetworkPolicies (every port a pod opens admits exactly its
// intended peers), the job shape (the JobSet's exit codes against the ones
// the programs exit with), the alert rules and the Grafana dashboard
// against the metric names the binaries export.
//
//   node validate.mjs check                 every check; exit 1 on an error
//   node validate.mjs render DIR            prints DIR's rendered YAML
//   node validate.mjs dashboard-rules FILE  prints a Prometheus rules file
//                                           with one recording rule per
//                                           dashboard query (for promtool)
//
// The library functions below are what tests/deploy/manifests_test.mjs
// calls. Every check returns a list of error strings naming the object and
// the field that is wrong; an empty list means the check passed.

import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import YAML from "yaml";

const HERE = path.dirname(fileURLToPath(import.meta.url));
export const DEPLOY = path.resolve(HERE, "..");
// The metric contract: names, types and labels of what the binaries export,
// the GPU exporter's allowed names and the target labels (one page, read by
// people, this validator and //tests/docs).
export const METRICS_PAGE = path.resolve(DEPLOY, "..", "docs", "metrics.md");
const NODE_MODULES = path.join(HERE, "node_modules");

// ---------------------------------------------------------------------------
// YAML

// Parses every document of a YAML file (empty documents dropped).
export function loadYamlFile(file) {
  const text = fs.readFileSync(file, "utf8");
  return YAML.parseAllDocuments(text).map((doc, i) => {
    if (doc.errors.length > 0) {
      throw new Error(`${file}: document ${i}: ${doc.errors[0].message}`);
    }
    return doc.toJS();
  }).filter((o) => o !== null && o !== undefined);
}

export function toYaml(objects) {
  return objects.map((o) => YAML.stringify(o)).join("---\n");
}

// ---------------------------------------------------------------------------
// A tiny kustomize: resources (files and directories), configMapGenerator
// (files and literals, name hash disabled), namespace, namePrefix, labels
// and commonLabels, images, patches (strategic merge, target taken from the
// patch's kind and name), configurations (fieldSpecs for nameReference and
// commonLabels, as kustomize reads them for kinds it does not know: the
// JobSet, the monitors). Anything else in a kustomization.yaml is an error,
// so that a feature the renderer does not implement cannot be silently
// ignored. `kubectl kustomize` (kustomize v5) renders the same objects; the
// `compare DIR` command checks that where kubectl is installed.
//
// Order, as kustomize's: resources and generators, patches, namespace,
// namePrefix, labels, images; then name references are rewritten to the
// prefixed names (only the fields nameReference lists: a name inside an
// argument string is never rewritten, by kustomize either).

const KUSTOMIZATION_KEYS = new Set(["apiVersion", "kind", "resources", "namespace", "images", "patches",
  "namePrefix", "labels", "commonLabels", "configMapGenerator", "generatorOptions", "configurations"]);
const CLUSTER_SCOPED = new Set([
  "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
  "DeviceClass", "PriorityClass", "StorageClass", "PersistentVolume",
]);

function objectId(o) {
  const ns = o.metadata?.namespace ? `${o.metadata.namespace}/` : "";
  return `${o.kind}/${ns}${o.metadata?.name}`;
}

function groupOf(apiVersion) {
  return apiVersion.includes("/") ? apiVersion.split("/")[0] : "";
}

// kustomize's built-in fieldSpecs for what these manifests use (a subset of
// api/konfig/builtinpluginconsts): a path of field names, lists traversed.
const POD_TEMPLATE_KINDS = [["apps", "Deployment"], ["apps", "StatefulSet"], ["apps", "DaemonSet"], ["apps", "ReplicaSet"], ["batch", "Job"]];
const POD_SPEC_REFS = {
  ConfigMap: ["containers/env/valueFrom/configMapKeyRef/name", "initContainers/env/valueFrom/configMapKeyRef/name",
    "containers/envFrom/configMapRef/name", "initContainers/envFrom/configMapRef/name",
    "volumes/configMap/name", "volumes/projected/sources/configMap/name"],
  Secret: ["containers/env/valueFrom/secretKeyRef/name", "initContainers/env/valueFrom/secretKeyRef/name",
    "containers/envFrom/secretRef/name", "initContainers/envFrom/secretRef/name",
    "volumes/secret/secretName", "volumes/projected/sources/secret/name", "imagePullSecrets/name"],
};
const BUILTIN_NAME_REFERENCES = [
  ...Object.entries(POD_SPEC_REFS).flatMap(([kind, paths]) => paths.flatMap((p) => [
    ...POD_TEMPLATE_KINDS.map(([group, k]) => ({ refKind: kind, refGroup: "", group, kind: k, path: `spec/template/spec/${p}` })),
    { refKind: kind, refGroup: "", group: "", kind: "Pod", path: `spec/${p}` },
  ])),
  { refKind: "Service", refGroup: "", group: "apps", kind: "StatefulSet", path: "spec/serviceName" },
];
const BUILTIN_COMMON_LABELS = [
  { path: "metadata/labels", create: true },
  { group: "", kind: "Service", path: "spec/selector", create: true, selector: true },
  ...POD_TEMPLATE_KINDS.flatMap(([group, kind]) => [
    { group, kind, path: "spec/selector/matchLabels", create: kind !== "Job", selector: true },
    { group, kind, path: "spec/template/metadata/labels", create: true, template: true },
  ]),
  { group: "networking.k8s.io", kind: "NetworkPolicy", path: "spec/podSelector/matchLabels", create: false, selector: true },
  { group: "networking.k8s.io", kind: "NetworkPolicy", path: "spec/ingress/from/podSelector/matchLabels", create: false, selector: true },
  { group: "networking.k8s.io", kind: "NetworkPolicy", path: "spec/egress/to/podSelector/matchLabels", create: false, selector: true },
];

function specApplies(spec, o) {
  if (spec.kind !== undefined && spec.kind !== o.kind) return false;
  if (spec.group !== undefined && spec.group !== groupOf(o.apiVersion)) return false;
  return true;
}

// Calls fn(parent, key) for every field the path reaches (lists traversed);
// `create` makes missing maps on the way (kustomize's create: true).
function walkPath(node, segments, create, fn) {
  if (Array.isArray(node)) {
    for (const item of node) walkPath(item, segments, create, fn);
    return;
  }
  if (!isObject(node)) return;
  const [key, ...rest] = segments;
  if (rest.length === 0) {
    if (node[key] !== undefined || create) fn(node, key);
    return;
  }
  if (node[key] === undefined) {
    if (!create) return;
    node[key] = {};
  }
  walkPath(node[key], rest, create, fn);
}

// configurations: files of transformer fieldSpecs (nameReference,
// commonLabels); their fieldSpecs join the built-in ones for this
// kustomization and every overlay above it, as in kustomize.
function loadConfigurations(dir, k, file) {
  const out = { nameReference: [], commonLabels: [] };
  for (const c of k.configurations ?? []) {
    const cfile = path.resolve(dir, c);
    const [doc] = loadYamlFile(cfile);
    for (const key of Object.keys(doc ?? {})) {
      if (!["nameReference", "commonLabels"].includes(key)) throw new Error(`${file}: configurations ${c}: '${key}' is not supported (nameReference, commonLabels)`);
    }
    for (const ref of doc.nameReference ?? []) {
      for (const fs_ of ref.fieldSpecs ?? []) {
        out.nameReference.push({ refKind: ref.kind, refGroup: ref.group ?? "", group: fs_.group, kind: fs_.kind, path: fs_.path });
      }
    }
    for (const fs_ of doc.commonLabels ?? []) {
      const selector = /selector/i.test(fs_.path);
      out.commonLabels.push({ group: fs_.group, kind: fs_.kind, path: fs_.path, create: fs_.create === true, selector, template: !selector });
    }
  }
  return out;
}

// configMapGenerator: data from files (KEY=FILE or FILE, under the
// kustomization's directory) and literals (KEY=VALUE). kustomize appends a
// hash of the content to the name unless told not to; this renderer does
// not compute that hash, so it asks for disableNameSuffixHash.
function generateConfigMaps(dir, k, file) {
  const out = [];
  const globalOpts = k.generatorOptions ?? {};
  for (const key of Object.keys(globalOpts)) {
    if (!["disableNameSuffixHash", "labels", "annotations"].includes(key)) throw new Error(`${file}: generatorOptions: '${key}' is not supported`);
  }
  for (const g of k.configMapGenerator ?? []) {
    for (const key of Object.keys(g)) {
      if (!["name", "files", "literals", "options"].includes(key)) throw new Error(`${file}: configMapGenerator ${g.name}: '${key}' is not supported (name, files, literals, options)`);
    }
    const opts = { ...globalOpts, ...(g.options ?? {}) };
    if (opts.disableNameSuffixHash !== true) {
      throw new Error(`${file}: configMapGenerator ${g.name}: set options.disableNameSuffixHash: true (this renderer does not compute kustomize's name hash)`);
    }
    const data = {};
    for (const f of g.files ?? []) {
      const eq = f.indexOf("=");
      const key = eq >= 0 ? f.slice(0, eq) : path.basename(f);
      const rel = eq >= 0 ? f.slice(eq + 1) : f;
      const p = path.resolve(dir, rel);
      if (path.relative(dir, p).startsWith("..")) throw new Error(`${file}: configMapGenerator ${g.name}: ${rel} is outside the kustomization's directory (kustomize refuses it)`);
      if (key in data) throw new Error(`${file}: configMapGenerator ${g.name}: key ${key} twice`);
      data[key] = fs.readFileSync(p, "utf8");
    }
    for (const l of g.literals ?? []) {
      const eq = l.indexOf("=");
      if (eq < 0) throw new Error(`${file}: configMapGenerator ${g.name}: literal '${l}' is not KEY=VALUE`);
      data[l.slice(0, eq)] = l.slice(eq + 1);
    }
    const metadata = { name: g.name };
    if (opts.labels) metadata.labels = { ...opts.labels };
    if (opts.annotations) metadata.annotations = { ...opts.annotations };
    out.push({ apiVersion: "v1", kind: "ConfigMap", metadata, data });
  }
  return out;
}

// The labels transformers of a kustomization: [{pairs, selectors,
// templates}] from `labels` and `commonLabels` (which is labels with
// includeSelectors).
function labelSets(k, file) {
  const out = [];
  for (const l of k.labels ?? []) {
    for (const key of Object.keys(l)) {
      if (!["pairs", "includeSelectors", "includeTemplates"].includes(key)) throw new Error(`${file}: labels: '${key}' is not supported (pairs, includeSelectors, includeTemplates)`);
    }
    out.push({ pairs: l.pairs ?? {}, selectors: l.includeSelectors === true, templates: l.includeSelectors === true || l.includeTemplates === true });
  }
  if (k.commonLabels) out.push({ pairs: k.commonLabels, selectors: true, templates: true });
  return out;
}

function applyLabels(objects, sets, specs) {
  for (const set of sets) {
    for (const o of objects) {
      for (const spec of specs) {
        if (!specApplies(spec, o)) continue;
        if (spec.selector && !set.selectors) continue;
        if (spec.template && !set.templates) continue;
        walkPath(o, spec.path.split("/"), spec.create, (parent, key) => {
          if (!isObject(parent[key])) parent[key] = {};
          Object.assign(parent[key], set.pairs);
        });
      }
    }
  }
}

// Renames from namePrefix: "KIND group name" -> new name, then every
// nameReference field that names a renamed object of its kind (in the same
// namespace, or either without one) gets the new name.
function applyNameReferences(objects, renames, specs) {
  for (const o of objects) {
    for (const spec of specs) {
      if (!specApplies(spec, o)) continue;
      walkPath(o, spec.path.split("/"), false, (parent, key) => {
        if (typeof parent[key] !== "string") return;
        const target = renames.find((r) => r.kind === spec.refKind && r.group === spec.refGroup && r.from === parent[key] &&
          (r.namespace === undefined || o.metadata.namespace === undefined || r.namespace === o.metadata.namespace));
        if (target) parent[key] = target.to;
      });
    }
  }
}

// Each rendered object remembers the fieldSpecs of the configurations below
// it (kustomize merges them into every overlay's transformers).
const CONFIGS = Symbol("kustomize configurations");

export function renderKustomization(dir) {
  const file = path.join(dir, "kustomization.yaml");
  if (!fs.existsSync(file)) throw new Error(`${dir}: no kustomization.yaml`);
  const [k] = loadYamlFile(file);
  for (const key of Object.keys(k)) {
    if (!KUSTOMIZATION_KEYS.has(key)) {
      throw new Error(`${file}: '${key}' is not supported by this renderer (supported: ${[...KUSTOMIZATION_KEYS].join(", ")})`);
    }
  }
  const configs = loadConfigurations(dir, k, file);
  let objects = [];
  for (const r of k.resources ?? []) {
    const p = path.resolve(dir, r);
    if (!fs.existsSync(p)) throw new Error(`${file}: resource '${r}' does not exist`);
    if (fs.statSync(p).isDirectory()) {
      const sub = renderKustomization(p);
      for (const key of ["nameReference", "commonLabels"]) configs[key].push(...(sub[CONFIGS]?.[key] ?? []));
      objects.push(...sub);
    } else {
      objects.push(...loadYamlFile(p));
    }
  }
  objects.push(...generateConfigMaps(dir, k, file));
  const seen = new Set();
  for (const o of objects) {
    if (!o.apiVersion || !o.kind || !o.metadata?.name) {
      throw new Error(`${dir}: an object without apiVersion, kind or metadata.name`);
    }
    const id = objectId(o);
    if (seen.has(id)) throw new Error(`${dir}: ${id} is defined twice`);
    seen.add(id);
  }
  for (const patch of k.patches ?? []) {
    const keys = Object.keys(patch).sort().join();
    if (keys !== "path" && keys !== "path,target") {
      throw new Error(`${file}: only 'patches: - path: FILE' (strategic merge) and '- path: FILE, target: {kind, name}' (JSON 6902) are supported, got ${JSON.stringify(patch)}`);
    }
    const pfile = path.resolve(dir, patch.path);
    if (patch.target) {
      const t = patch.target;
      for (const key of Object.keys(t)) if (!["group", "version", "kind", "name"].includes(key)) throw new Error(`${file}: patches target: '${key}' is not supported`);
      const matches = objects.filter((o) => o.kind === t.kind && o.metadata.name === t.name && (t.group === undefined || groupOf(o.apiVersion) === t.group));
      if (matches.length !== 1) throw new Error(`${pfile}: target ${JSON.stringify(t)} matches ${matches.length} objects`);
      const [ops] = loadYamlFile(pfile);
      if (!Array.isArray(ops)) throw new Error(`${pfile}: a patch with a target must be a JSON 6902 list of operations`);
      applyJson6902(matches[0], ops, `${pfile}: `);
      continue;
    }
    for (const p of loadYamlFile(pfile)) {
      const target = objects.findIndex((o) => o.kind === p.kind && o.metadata.name === p.metadata?.name &&
        groupOf(o.apiVersion) === groupOf(p.apiVersion ?? ""));
      if (target < 0) throw new Error(`${pfile}: no ${p.apiVersion} ${p.kind} named '${p.metadata?.name}' to patch`);
      // kustomize knows no merge keys for custom resources: their lists are
      // replaced whole (a JSON merge patch); patch them with JSON 6902.
      const custom = !MODEL_PACKAGES[groupOf(p.apiVersion ?? "")] && CRD_FILES[groupOf(p.apiVersion ?? "")];
      objects[target] = strategicMerge(objects[target], p, `${pfile}: `, "", custom ? "json" : "strategic");
    }
  }
  if (k.namespace) {
    for (const o of objects) if (!CLUSTER_SCOPED.has(o.kind)) o.metadata.namespace = k.namespace;
  }
  if (k.namePrefix) {
    const renames = [];
    for (const o of objects) {
      if (o.kind === "CustomResourceDefinition" || o.kind === "Namespace") continue;
      const to = `${k.namePrefix}${o.metadata.name}`;
      renames.push({ kind: o.kind, group: groupOf(o.apiVersion), from: o.metadata.name, to, namespace: o.metadata.namespace });
      o.metadata.name = to;
    }
    applyNameReferences(objects, renames, [...BUILTIN_NAME_REFERENCES, ...configs.nameReference]);
  }
  applyLabels(objects, labelSets(k, file), [...BUILTIN_COMMON_LABELS, ...configs.commonLabels]);
  for (const img of k.images ?? []) {
    for (const key of Object.keys(img)) {
      if (!["name", "newName", "newTag", "digest"].includes(key)) throw new Error(`${file}: images: '${key}' is not supported`);
    }
    let used = false;
    for (const o of objects) {
      for (const c of podContainers(o)) {
        if (imageName(c.image) !== img.name) continue;
        used = true;
        let image = img.newName ?? imageName(c.image);
        if (img.digest) image += `@${img.digest}`;
        else if (img.newTag) image += `:${img.newTag}`;
        else if (c.image.length > imageName(c.image).length) image += c.image.slice(imageName(c.image).length);
        c.image = image;
      }
    }
    if (!used) throw new Error(`${file}: images: no container uses image '${img.name}'`);
  }
  Object.defineProperty(objects, CONFIGS, { value: configs, enumerable: false });
  return objects;
}

// The image's name without tag or digest.
export function imageName(image) {
  const at = image.indexOf("@");
  const noDigest = at >= 0 ? image.slice(0, at) : image;
  const slash = noDigest.lastIndexOf("/");
  const colon = noDigest.lastIndexOf(":");
  return colon > slash ? noDigest.slice(0, colon) : noDigest;
}

// Merge keys of the lists that patches may touch (Kubernetes' strategic
// merge patch metadata for these fields). Other lists of objects are
// refused: a replace would silently drop the base's entries.
const MERGE_KEYS = {
  containers: "name",
  initContainers: "name",
  env: "name",
  volumes: "name",
  volumeMounts: "mountPath",
  resourceClaims: "name",
  claims: "name",
  imagePullSecrets: "name",
  tolerations: null,  // replaced (no merge key in Kubernetes either)
  ingress: null,      // NetworkPolicy rules: replaced, as in Kubernetes
  egress: null,
};

export function strategicMerge(base, patch, where = "", at = "", mode = "strategic") {
  if (!isObject(patch) || !isObject(base)) return clone(patch);
  const out = clone(base);
  for (const [key, value] of Object.entries(patch)) {
    const p = at ? `${at}.${key}` : key;
    if (key.startsWith("$")) throw new Error(`${where}${p}: patch directives are not supported`);
    if (value === null) {
      delete out[key];
    } else if (Array.isArray(value)) {
      out[key] = mode === "json" ? clone(value) : mergeList(out[key], value, key, where, p);
    } else if (isObject(value) && isObject(out[key])) {
      out[key] = strategicMerge(out[key], value, where, p, mode);
    } else {
      out[key] = clone(value);
    }
  }
  return out;
}

function mergeList(base, patch, key, where, at) {
  if (!patch.some(isObject)) return clone(patch);  // Primitive lists: replaced.
  let mergeKey = MERGE_KEYS[key];
  if (key === "ports") mergeKey = patch.every((p) => "containerPort" in p) ? "containerPort" : "port";
  if (mergeKey === undefined) throw new Error(`${where}${at}: no merge key known for this list; patch it whole in the base instead`);
  if (mergeKey === null) return clone(patch);
  const out = clone(base ?? []);
  const added = [];
  for (const item of patch) {
    if (!(mergeKey in item)) throw new Error(`${where}${at}: an entry without its merge key '${mergeKey}'`);
    const i = out.findIndex((o) => o[mergeKey] === item[mergeKey]);
    if (i >= 0) out[i] = strategicMerge(out[i], item, where, `${at}[${mergeKey}=${item[mergeKey]}]`);
    else added.push(clone(item));
  }
  // New entries come first, in the patch's order, as kustomize puts them.
  return [...added, ...out];
}

// JSON 6902 operations add, replace, remove, test (RFC 6902; "-" appends).
export function applyJson6902(target, ops, where = "") {
  for (const op of ops) {
    if (!["add", "replace", "remove", "test"].includes(op.op)) throw new Error(`${where}op '${op.op}' is not supported`);
    const parts = op.path.split("/").slice(1).map((x) => x.replaceAll("~1", "/").replaceAll("~0", "~"));
    const last = parts.pop();
    let node = target;
    for (const part of parts) {
      node = node?.[Array.isArray(node) ? Number(part) : part];
      if (node === undefined) throw new Error(`${where}${op.op} ${op.path}: no such path`);
    }
    const exists = Array.isArray(node) ? last === "-" || Number(last) < node.length : isObject(node) && last in node;
    if (op.op !== "add" && !exists) throw new Error(`${where}${op.op} ${op.path}: no such path`);
    if (op.op === "test") {
      if (JSON.stringify(node[last]) !== JSON.stringify(op.value)) throw new Error(`${where}test ${op.path}: is ${JSON.stringify(node[last])}, not ${JSON.stringify(op.value)}`);
    } else if (op.op === "remove") {
      if (Array.isArray(node)) node.splice(Number(last), 1);
      else delete node[last];
    } else if (Array.isArray(node)) {
      if (op.op === "add") node.splice(last === "-" ? node.length : Number(last), 0, clone(op.value));
      else node[Number(last)] = clone(op.value);
    } else {
      node[last] = clone(op.value);
    }
  }
}

function isObject(v) {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function clone(v) {
  return v === undefined ? undefined : structuredClone(v);
}

// ---------------------------------------------------------------------------
// Schema validation: the model class of each apiVersion/kind, and .validate().

const MODEL_PACKAGES = {
  "monitoring.coreos.com": "@kubernetes-models/prometheus-operator",
  "cert-manager.io": "@kubernetes-models/cert-manager",
};

function modelModule(apiVersion) {
  const group = groupOf(apiVersion);
  const pkg = MODEL_PACKAGES[group] ?? "kubernetes-models";
  return `${pkg}/${apiVersion}`;
}

// The model class of an object, or an error string for an unknown kind.
async function modelClass(o) {
  const spec = modelModule(o.apiVersion);
  let mod;
  try {
    mod = await import(spec);
  } catch {
    return `${objectId(o)}: unknown apiVersion '${o.apiVersion}'`;
  }
  const cls = mod[o.kind];
  if (typeof cls !== "function" || cls.kind !== o.kind || cls.apiVersion !== o.apiVersion) {
    return `${objectId(o)}: unknown kind '${o.kind}' in ${o.apiVersion}`;
  }
  return cls;
}

// CustomResourceDefinitions without a model package: the CRD file as its
// project publishes it (deploy/validate/crds/, see the README there), read
// for its openAPIV3Schema.
export const CRD_FILES = {
  "jobset.x-k8s.io": path.join(HERE, "crds/jobset.x-k8s.io_jobsets.yaml"),
};
const crdCache = new Map();

function crdSchema(o) {
  const file = CRD_FILES[groupOf(o.apiVersion)];
  if (!file) return undefined;
  if (!crdCache.has(file)) crdCache.set(file, loadYamlFile(file));
  const version = o.apiVersion.split("/")[1];
  const crd = crdCache.get(file).find((c) => c.kind === "CustomResourceDefinition" && c.spec.names.kind === o.kind);
  const v = crd?.spec.versions.find((x) => x.name === version && x.served !== false);
  return v?.schema?.openAPIV3Schema ?? null;
}

const OBJECT_META_FIELDS = new Set(["name", "namespace", "labels", "annotations", "generateName", "finalizers", "ownerReferences"]);

// A structural schema (the subset CRDs use): types, properties (unknown
// fields refused, as kubectl's strict validation does), additionalProperties,
// required, enum, minimum/maximum, items and their bounds, int-or-string,
// preserve-unknown-fields. CEL rules (x-kubernetes-validations) are not
// evaluated.
export function checkOpenApi(value, schema, at, errors) {
  if (value === null || value === undefined || !schema) return;
  if (schema["x-kubernetes-int-or-string"]) {
    if (!Number.isInteger(value) && typeof value !== "string") errors.push(`${at}: must be an integer or a string`);
    return;
  }
  const type = schema.type;
  const is = {
    object: isObject(value), array: Array.isArray(value), string: typeof value === "string",
    integer: Number.isInteger(value), number: typeof value === "number", boolean: typeof value === "boolean",
  };
  if (type && !is[type]) {
    errors.push(`${at}: must be ${type}, is ${JSON.stringify(value)}`);
    return;
  }
  if (schema.enum && !schema.enum.includes(value)) errors.push(`${at}: ${JSON.stringify(value)} is not one of ${schema.enum.join(", ")}`);
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) errors.push(`${at}: ${value} < minimum ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) errors.push(`${at}: ${value} > maximum ${schema.maximum}`);
  }
  if (Array.isArray(value)) {
    if (schema.maxItems !== undefined && value.length > schema.maxItems) errors.push(`${at}: more than ${schema.maxItems} items`);
    if (schema.minItems !== undefined && value.length < schema.minItems) errors.push(`${at}: fewer than ${schema.minItems} items`);
    value.forEach((v, i) => checkOpenApi(v, schema.items, `${at}[${i}]`, errors));
    return;
  }
  if (!isObject(value)) return;
  for (const r of schema.required ?? []) if (!(r in value)) errors.push(`${at}: '${r}' is required`);
  if (schema["x-kubernetes-preserve-unknown-fields"] && !schema.properties) return;
  for (const [k, v] of Object.entries(value)) {
    if (schema.properties?.[k]) checkOpenApi(v, schema.properties[k], `${at}.${k}`, errors);
    else if (isObject(schema.additionalProperties)) checkOpenApi(v, schema.additionalProperties, `${at}.${k}`, errors);
    else if (schema.properties && !schema["x-kubernetes-preserve-unknown-fields"]) errors.push(`${at}: unknown field '${k}'`);
  }
}

// The Jobs a JobSet's controller makes from its replicatedJobs, as batch/v1
// Jobs (each template also checked with the Kubernetes models, like any
// Job here).
export function jobsOfJobSet(o) {
  return (o.spec?.replicatedJobs ?? []).map((rj) => ({
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: { ...(rj.template?.metadata ?? {}), name: `${o.metadata.name}-${rj.name}-0`, ...(o.metadata.namespace ? { namespace: o.metadata.namespace } : {}) },
    spec: rj.template?.spec,
  }));
}

async function validateModel(o, errors, as = objectId(o)) {
  const cls = await modelClass(o);
  if (typeof cls === "string") {
    errors.push(cls);
    return;
  }
  try {
    new cls(clone(o)).validate();
  } catch (e) {
    errors.push(`${as}: ${e.message}`);
  }
  errors.push(...strictFields(o).map((e) => (as === objectId(o) ? e : `${as}: ${e}`)));
}

export async function validateSchemas(objects) {
  const errors = [];
  for (const o of objects) {
    const schema = crdSchema(o);
    if (schema === null) {
      errors.push(`${objectId(o)}: unknown kind '${o.kind}' in ${o.apiVersion} (not in ${CRD_FILES[groupOf(o.apiVersion)]})`);
      continue;
    }
    if (schema) {
      checkOpenApi(o, schema, objectId(o), errors);
      for (const k of Object.keys(o.metadata ?? {})) if (!OBJECT_META_FIELDS.has(k)) errors.push(`${objectId(o)}.metadata: unknown field '${k}'`);
      if (o.kind === "JobSet") {
        for (const job of jobsOfJobSet(o)) await validateModel(job, errors, `${objectId(o)} replicatedJob ${job.metadata.name}`);
      }
      continue;
    }
    await validateModel(o, errors);
  }
  return errors;
}

// --- Unknown fields. The schemas of kubernetes-models accept any extra
// property (so does a lenient API server; `kubectl apply --validate=strict`
// does not). The packages' TypeScript declarations list every field, so a
// small reader of those .d.ts files gives each object's allowed fields.

const dtsCache = new Map();

function dtsPath(spec, fromFile) {
  let p;
  if (spec.startsWith(".")) p = path.resolve(path.dirname(fromFile), spec);
  else p = path.join(NODE_MODULES, spec);
  return p.replace(/\.js$/, "") + ".d.ts";
}

function tokenize(text) {
  text = text.replace(/\/\*[\s\S]*?\*\//g, " ").replace(/^\s*\/\/.*$/gm, " ");
  const re = /\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[A-Za-z_$][\w$]*|-?\d+(?:\.\d+)?|\S)/gy;
  const tokens = [];
  let m;
  while ((m = re.exec(text)) !== null && m[1] !== undefined) tokens.push(m[1]);
  return tokens;
}

class TypeParser {
  constructor(tokens) {
    this.t = tokens;
    this.i = 0;
  }
  peek(o = 0) { return this.t[this.i + o]; }
  next() { return this.t[this.i++]; }
  expect(tok) {
    const got = this.next();
    if (got !== tok) throw new Error(`expected '${tok}', got '${got}'`);
  }
  type() {
    const members = [this.postfix()];
    while (this.peek() === "|") {
      this.next();
      members.push(this.postfix());
    }
    return members.length === 1 ? members[0] : { k: "union", of: members };
  }
  postfix() {
    let t = this.primary();
    while (this.peek() === "[" && this.peek(1) === "]") {
      this.i += 2;
      t = { k: "arr", of: t };
    }
    return t;
  }
  primary() {
    const tok = this.next();
    if (tok === "(") {
      const t = this.type();
      this.expect(")");
      return t;
    }
    if (tok === "{") return this.members("}");
    if (tok === "Array" && this.peek() === "<") {
      this.next();
      const t = this.type();
      this.expect(">");
      return { k: "arr", of: t };
    }
    if (/^[A-Za-z_$]/.test(tok)) {
      if (this.peek() === "<") {  // Other generics: skip the arguments.
        let depth = 0;
        do {
          const x = this.next();
          if (x === "<") depth++;
          if (x === ">") depth--;
        } while (depth > 0);
        return { k: "any" };
      }
      if (["string", "number", "boolean", "null", "undefined", "unknown", "any", "object"].includes(tok)) return { k: "prim" };
      return { k: "ref", name: tok };
    }
    return { k: "prim" };  // String and number literal types.
  }
  // Members up to `close`: "name"?: T; and [key: string]: T;
  members(close) {
    const props = new Map();
    let index = null;
    while (this.peek() !== close) {
      if (this.peek() === "[") {
        this.next();
        this.next();  // key
        this.expect(":");
        this.next();  // string
        this.expect("]");
        this.expect(":");
        index = this.type();
      } else {
        let name = this.next();
        if (name === "readonly" && this.peek() !== ":" && this.peek() !== "?") name = this.next();
        if (/^["']/.test(name)) name = JSON.parse(name.replace(/^'|'$/g, '"'));
        if (this.peek() === "?") this.next();
        if (this.peek() === "(" ) throw new Error(`methods are not expected (${name})`);
        this.expect(":");
        props.set(name, this.type());
      }
      if (this.peek() === ";" || this.peek() === ",") this.next();
    }
    this.next();
    return { k: "obj", props, index };
  }
}

// Reads a .d.ts file: its imports, interfaces, type aliases and the names
// it exports them under.
function readDts(file) {
  if (dtsCache.has(file)) return dtsCache.get(file);
  const info = { file, imports: new Map(), decls: new Map(), exports: new Map() };
  dtsCache.set(file, info);
  if (!fs.existsSync(file)) return info;
  const t = tokenize(fs.readFileSync(file, "utf8"));
  for (let i = 0; i < t.length; i++) {
    if (t[i] === "import" && t[i + 1] === "{") {
      let j = i + 2;
      const names = [];
      while (t[j] !== "}") {
        const name = t[j];
        let local = name;
        if (t[j + 1] === "as") {
          local = t[j + 2];
          j += 2;
        }
        names.push([name, local]);
        j++;
        if (t[j] === ",") j++;
      }
      const from = JSON.parse(t[j + 2]);
      for (const [name, local] of names) info.imports.set(local, { name, file: dtsPath(from, file) });
      i = j + 2;
    } else if (t[i] === "export" && t[i + 1] === "interface") {
      const name = t[i + 2];
      let j = i + 3;
      const bases = [];
      if (t[j] === "extends") {
        j++;
        while (t[j] !== "{") {
          if (t[j] !== ",") bases.push(t[j]);
          j++;
        }
      }
      const p = new TypeParser(t);
      p.i = j + 1;
      const body = p.members("}");
      if (bases.includes("TypeMeta")) {
        body.props.set("apiVersion", { k: "prim" });
        body.props.set("kind", { k: "prim" });
      }
      // Other bases' fields are merged in when checked (an interface that
      // only extends another, like cert-manager's IssuerSpec).
      body.bases = bases.filter((b) => b !== "TypeMeta");
      info.decls.set(name, body);
      info.exports.set(name, name);
      i = p.i - 1;
    } else if (t[i] === "export" && t[i + 1] === "type" && t[i + 2] === "{") {
      let j = i + 3;
      while (t[j] !== "}") {
        const name = t[j];
        let exported = name;
        if (t[j + 1] === "as") {
          exported = t[j + 2];
          j += 2;
        }
        info.exports.set(exported, name);
        j++;
        if (t[j] === ",") j++;
      }
      i = j;
    } else if (t[i] === "export" && t[i + 1] === "type" && t[i + 3] === "=") {
      const p = new TypeParser(t);
      p.i = i + 4;
      info.decls.set(t[i + 2], p.type());
      info.exports.set(t[i + 2], t[i + 2]);
      i = p.i - 1;
    }
  }
  return info;
}

// Resolves a type reference seen in `file` to [type, file it lives in].
function resolveRef(name, file, depth = 0) {
  if (depth > 8) return null;
  const info = readDts(file);
  const local = info.exports.get(name) ?? name;
  if (info.decls.has(local)) return [info.decls.get(local), file];
  if (info.imports.has(name)) {
    const imp = info.imports.get(name);
    return resolveRef(imp.name, imp.file, depth + 1);
  }
  return null;
}

// An object type's fields, its interface bases' included: name -> [type,
// file it is declared in]; index: [type, file] or null.
function objectMembers(type, file, depth = 0) {
  const props = new Map();
  let index = type.index ? [type.index, file] : null;
  for (const base of depth < 8 ? type.bases ?? [] : []) {
    const r = resolveRef(base, file);
    if (!r || r[0].k !== "obj") continue;
    const inherited = objectMembers(r[0], r[1], depth + 1);
    for (const [k, v] of inherited.props) props.set(k, v);
    index ??= inherited.index;
  }
  for (const [k, v] of type.props) props.set(k, [v, file]);
  return { props, index };
}

function checkFields(value, type, file, at, errors) {
  if (value === null || value === undefined || !type) return;
  switch (type.k) {
    case "ref": {
      const r = resolveRef(type.name, file);
      if (r) checkFields(value, r[0], r[1], at, errors);
      return;
    }
    case "arr":
      if (Array.isArray(value)) value.forEach((v, i) => checkFields(v, type.of, file, `${at}[${i}]`, errors));
      return;
    case "union": {
      const objects = type.of.filter((t) => t.k === "ref" || t.k === "obj");
      if (isObject(value) && objects.length === 1) checkFields(value, objects[0], file, at, errors);
      return;
    }
    case "obj": {
      if (!isObject(value)) return;
      const { props, index } = objectMembers(type, file);
      for (const [key, v] of Object.entries(value)) {
        if (props.has(key)) checkFields(v, props.get(key)[0], props.get(key)[1], `${at}.${key}`, errors);
        else if (index) checkFields(v, index[0], index[1], `${at}.${key}`, errors);
        else errors.push(`${at}: unknown field '${key}'`);
      }
      return;
    }
    default:
  }
}

// Unknown fields of one object (its kind's declaration in the model package).
export function strictFields(o) {
  const file = path.join(NODE_MODULES, modelModule(o.apiVersion), `${o.kind}.d.ts`);
  const r = resolveRef(`I${o.kind}`, file);
  if (!r) return [`${objectId(o)}: no type declaration for ${o.apiVersion} ${o.kind}`];
  const errors = [];
  checkFields(o, r[0], r[1], objectId(o), errors);
  return errors;
}

// ---------------------------------------------------------------------------
// Semantic checks of the rendered objects.

// Every pod template of an object: { o, spec, labels, id, job }. A JobSet
// has one per replicatedJob (job: that Job's spec; labels: the template's
// plus those the JobSet controller adds); the others one or none.
export function podTemplates(o) {
  if (["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"].includes(o.kind) && o.spec?.template?.spec) {
    return [{ o, spec: o.spec.template.spec, labels: o.spec.template.metadata?.labels ?? {}, id: objectId(o), job: o.kind === "Job" ? o.spec : undefined }];
  }
  if (o.kind === "Pod" && o.spec) return [{ o, spec: o.spec, labels: o.metadata.labels ?? {}, id: objectId(o) }];
  if (o.kind === "JobSet") {
    return (o.spec?.replicatedJobs ?? []).filter((rj) => rj.template?.spec?.template?.spec).map((rj) => ({
      o,
      rj,
      job: rj.template.spec,
      spec: rj.template.spec.template.spec,
      labels: { ...(rj.template.spec.template.metadata?.labels ?? {}), "jobset.sigs.k8s.io/jobset-name": o.metadata.name, "jobset.sigs.k8s.io/replicatedjob-name": rj.name },
      id: `${objectId(o)} replicatedJob ${rj.name}`,
    }));
  }
  return [];
}

function allTemplates(objects) {
  return objects.flatMap(podTemplates);
}

function podContainers(o) {
  return podTemplates(o).flatMap((t) => [...(t.spec.initContainers ?? []), ...(t.spec.containers ?? [])]);
}

// The pod template of the trainers and of the coordinator, whatever the form
// (StatefulSet and Deployment, or a JobSet's replicatedJobs), found by the
// pods' app.kubernetes.io/name; undefined when absent.
export function trainerTemplate(objects) {
  return allTemplates(objects).find((t) => t.labels["app.kubernetes.io/name"] === "shardd-trainer");
}

export function coordinatorTemplate(objects) {
  return allTemplates(objects).find((t) => t.labels["app.kubernetes.io/name"] === "shardd-coordinator");
}

function find(objects, kind, name) {
  return objects.find((o) => o.kind === kind && o.metadata.name === name);
}

// The value of --NAME=VALUE in a container's args (undefined when absent).
export function flag(container, name) {
  const prefix = `--${name}=`;
  const a = [...(container.command ?? []), ...(container.args ?? [])].find((x) => x.startsWith(prefix));
  return a === undefined ? undefined : a.slice(prefix.length);
}

// The trainer pod: a shardd native sidecar sharing an in-memory volume and a
// GPU claim with the trainer container.
export function checkSidecar(objects) {
  const errors = [];
  const t = trainerTemplate(objects);
  if (!t) return ["no trainer pod template (app.kubernetes.io/name: shardd-trainer)"];
  const id = t.id;
  const spec = t.spec;
  const sidecar = (spec.initContainers ?? []).find((c) => c.name === "shardd");
  const trainer = (spec.containers ?? []).find((c) => c.name === "trainer");
  if ((spec.containers ?? []).some((c) => c.name === "shardd")) {
    errors.push(`${id}: shardd must be an init container (native sidecar), not a regular container`);
  }
  if (!sidecar) return [...errors, `${id}: no init container 'shardd'`];
  if (!trainer) return [...errors, `${id}: no container 'trainer'`];
  if (sidecar.restartPolicy !== "Always") {
    errors.push(`${id}: initContainers[shardd].restartPolicy must be Always (a native sidecar), is ${sidecar.restartPolicy}`);
  }
  // The in-memory volume with the socket and the segments.
  const shmDir = flag(sidecar, "shm_dir");
  const mountOf = (c) => (c.volumeMounts ?? []).find((m) => m.mountPath === shmDir);
  const sm = mountOf(sidecar);
  const tm = mountOf(trainer);
  if (!shmDir) errors.push(`${id}: shardd has no --shm_dir`);
  else if (!sm || !tm) errors.push(`${id}: --shm_dir ${shmDir} must be a volume mounted in both shardd and trainer`);
  else if (sm.name !== tm.name) errors.push(`${id}: shardd and trainer mount different volumes at ${shmDir}`);
  else {
    const vol = (spec.volumes ?? []).find((v) => v.name === sm.name);
    if (vol?.emptyDir?.medium !== "Memory") errors.push(`${id}: volume '${sm.name}' must be an emptyDir with medium: Memory`);
  }
  const socket = flag(trainer, "socket");
  if (shmDir && socket !== `${shmDir}/shardd.sock`) {
    errors.push(`${id}: trainer --socket (${socket}) must be the daemon's socket ${shmDir}/shardd.sock`);
  }
  // The GPU: none (the CPU form), one DRA claim referenced by both
  // containers (a pod with resourceClaims), or a device-plugin request
  // (checkDevicePlugin).
  const claims = spec.resourceClaims ?? [];
  const sc = (sidecar.resources?.claims ?? []).map((c) => c.name);
  const tc = (trainer.resources?.claims ?? []).map((c) => c.name);
  const shared = sc.filter((n) => tc.includes(n));
  const gpuLimits = [sidecar, trainer].filter((c) => Object.keys(c.resources?.limits ?? {}).some((k) => k.endsWith("/gpu")));
  const dra = claims.length > 0 || sc.length > 0 || tc.length > 0;
  if (dra && shared.length === 0) errors.push(`${id}: shardd and trainer must reference the same resource claim (resources.claims: shardd ${JSON.stringify(sc)}, trainer ${JSON.stringify(tc)})`);
  for (const n of new Set([...sc, ...tc])) {
    const c = claims.find((x) => x.name === n);
    if (!c) {
      errors.push(`${id}: resources.claims '${n}' is not in spec.resourceClaims`);
    } else if (c.resourceClaimTemplateName && !find(objects, "ResourceClaimTemplate", c.resourceClaimTemplateName)) {
      errors.push(`${id}: spec.resourceClaims[${n}] names ResourceClaimTemplate '${c.resourceClaimTemplateName}', which is not deployed`);
    } else if (!c.resourceClaimTemplateName && !c.resourceClaimName) {
      errors.push(`${id}: spec.resourceClaims[${n}] names no claim or template`);
    }
  }
  if (dra) {
    for (const c of gpuLimits) {
      for (const key of Object.keys(c.resources.limits)) {
        if (key.endsWith("/gpu")) errors.push(`${id}: ${c.name} asks for ${key} (a device for one container only) besides the shared claim`);
      }
    }
  } else if (gpuLimits.length > 1) {
    errors.push(`${id}: ${gpuLimits.map((c) => c.name).join(" and ")} each ask for a device-plugin GPU: each gets a device of its own, not the same one (give it to shardd only, see deploy/README.md)`);
  } else if (gpuLimits.length === 1) {
    errors.push(...checkDevicePlugin(t, sidecar, trainer));
  }
  return errors;
}

// The Pod Security Standards' "restricted" profile, for every container of
// every pod template.
export function checkRestricted(objects) {
  const errors = [];
  for (const { spec, id } of allTemplates(objects)) {
    const pod = spec.securityContext ?? {};
    for (const key of ["hostNetwork", "hostPID", "hostIPC"]) if (spec[key]) errors.push(`${id}: ${key} must not be set`);
    for (const v of spec.volumes ?? []) if (v.hostPath) errors.push(`${id}: volume '${v.name}' is a hostPath`);
    if (pod.runAsUser === 0) errors.push(`${id}: securityContext.runAsUser must not be 0`);
    for (const c of [...(spec.initContainers ?? []), ...(spec.containers ?? [])]) {
      const s = c.securityContext ?? {};
      const where = `${id}: container ${c.name}`;
      if ((s.runAsNonRoot ?? pod.runAsNonRoot) !== true) errors.push(`${where}: runAsNonRoot must be true`);
      if ((s.runAsUser ?? pod.runAsUser) === 0) errors.push(`${where}: runAsUser must not be 0`);
      if (s.allowPrivilegeEscalation !== false) errors.push(`${where}: allowPrivilegeEscalation must be false`);
      if (s.privileged) errors.push(`${where}: privileged must not be set`);
      if (!(s.capabilities?.drop ?? []).includes("ALL")) errors.push(`${where}: capabilities.drop must include ALL`);
      const added = (s.capabilities?.add ?? []).filter((x) => x !== "NET_BIND_SERVICE");
      if (added.length > 0) errors.push(`${where}: capabilities.add ${added.join(",")} is not allowed`);
      const seccomp = (s.seccompProfile ?? pod.seccompProfile)?.type;
      if (!["RuntimeDefault", "Localhost"].includes(seccomp)) errors.push(`${where}: seccompProfile.type must be RuntimeDefault (is ${seccomp})`);
      if (s.readOnlyRootFilesystem !== true) errors.push(`${where}: readOnlyRootFilesystem must be true`);
      if (!c.resources?.requests?.cpu || !c.resources?.requests?.memory || !c.resources?.limits?.memory) {
        errors.push(`${where}: resources must request cpu and memory and limit memory`);
      }
    }
  }
  return errors;
}

function probeKey(p) {
  return JSON.stringify({ grpc: p?.grpc, httpGet: p?.httpGet, tcpSocket: p?.tcpSocket, exec: p?.exec });
}

// Probes: gRPC health on a port the container declares; the sidecar's
// liveness asks a different question than its readiness.
export function checkProbes(objects) {
  const errors = [];
  for (const { spec, id } of allTemplates(objects)) {
    for (const c of [...(spec.initContainers ?? []), ...(spec.containers ?? [])]) {
      const where = `${id}: container ${c.name}`;
      for (const kind of ["startupProbe", "readinessProbe", "livenessProbe"]) {
        const p = c[kind];
        if (!p?.grpc) continue;
        if (!(c.ports ?? []).some((x) => x.containerPort === p.grpc.port)) {
          errors.push(`${where}: ${kind}.grpc.port ${p.grpc.port} is not a declared containerPort`);
        }
      }
    }
  }
  const t = trainerTemplate(objects);
  const sidecar = t?.spec.initContainers?.find((c) => c.name === "shardd");
  if (!sidecar) return [...errors, "no shardd sidecar in a trainer pod template to check probes of"];
  const where = `${t.id}: container shardd`;
  for (const kind of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    if (!sidecar[kind]?.grpc) errors.push(`${where}: ${kind} must be a gRPC health probe`);
  }
  const live = sidecar.livenessProbe;
  const ready = sidecar.readinessProbe;
  if (live && ready) {
    if (probeKey(live) === probeKey(ready)) {
      errors.push(`${where}: livenessProbe must not ask what readinessProbe asks (liveness must not depend on peers)`);
    }
    if ((live.grpc?.service ?? "") === (ready.grpc?.service ?? "") && live.grpc && ready.grpc) {
      errors.push(`${where}: livenessProbe and readinessProbe use the same health service '${live.grpc.service ?? ""}'`);
    }
  }
  if (sidecar.startupProbe) {
    const s = sidecar.startupProbe;
    const budget = (s.periodSeconds ?? 10) * (s.failureThreshold ?? 3);
    if (budget < 60) errors.push(`${where}: startupProbe allows only ${budget}s to join; give it at least 60s`);
  }
  return errors;
}

// The job's shape: replicas = W, F | W, the coordinator and the daemons
// agree on addresses, the peers Service is headless and publishes not-ready
// pods, the monitors select the pods and ports that exist.
export function checkJob(objects) {
  if (trainerTemplate(objects)?.o.kind === "JobSet") return checkJobSet(objects);
  const errors = [];
  const cm = find(objects, "ConfigMap", "shardd-job");
  const sts = find(objects, "StatefulSet", "shardd-trainer");
  const coordinator = find(objects, "Deployment", "shardd-coordinator");
  const coordSvc = find(objects, "Service", "shardd-coordinator");
  if (!cm || !sts || !coordinator || !coordSvc) return ["shardd-job ConfigMap, shardd-trainer StatefulSet and shardd-coordinator Deployment and Service must all exist"];
  const w = Number(cm.data?.WORLD_SIZE);
  const f = Number(cm.data?.SHARDING_FACTOR);
  if (!(w >= 1) || !(f >= 1) || w % f !== 0) errors.push(`${objectId(cm)}: SHARDING_FACTOR (${cm.data?.SHARDING_FACTOR}) must divide WORLD_SIZE (${cm.data?.WORLD_SIZE})`);
  if (sts.spec.replicas !== w) errors.push(`${objectId(sts)}: replicas (${sts.spec.replicas}) must equal WORLD_SIZE (${w}) of ConfigMap shardd-job`);
  if (sts.spec.podManagementPolicy !== "Parallel") errors.push(`${objectId(sts)}: podManagementPolicy must be Parallel (no pod is ready before all W have joined)`);
  const peers = find(objects, "Service", sts.spec.serviceName);
  if (!peers) errors.push(`${objectId(sts)}: serviceName '${sts.spec.serviceName}' is not a deployed Service`);
  else {
    if (peers.spec.clusterIP !== "None") errors.push(`${objectId(peers)}: must be headless (clusterIP: None)`);
    if (peers.spec.publishNotReadyAddresses !== true) errors.push(`${objectId(peers)}: publishNotReadyAddresses must be true (replacements recover before they are ready)`);
  }
  const podLabels = sts.spec.template.metadata?.labels ?? {};
  const selects = (sel, labels) => Object.entries(sel?.matchLabels ?? sel ?? {}).every(([k, v]) => labels[k] === v);
  if (!selects(sts.spec.selector, podLabels)) errors.push(`${objectId(sts)}: selector does not match the pod template's labels`);
  if (peers && !selects(peers.spec.selector, podLabels)) errors.push(`${objectId(peers)}: selector does not match the trainer pods`);
  const sidecar = sts.spec.template.spec.initContainers?.find((c) => c.name === "shardd");
  const coordPort = coordSvc.spec.ports.find((p) => p.name === "grpc")?.port;
  if (sidecar && flag(sidecar, "coordinator") !== `${coordSvc.metadata.name}:${coordPort}`) {
    errors.push(`${objectId(sts)}: shardd --coordinator (${flag(sidecar, "coordinator")}) must be Service ${coordSvc.metadata.name}:${coordPort}`);
  }
  const c = coordinator.spec.template.spec.containers[0];
  if (!selects(coordSvc.spec.selector, coordinator.spec.template.metadata?.labels ?? {})) errors.push(`${objectId(coordSvc)}: selector does not match the coordinator pods`);
  const grpcTarget = coordSvc.spec.ports.find((p) => p.name === "grpc")?.targetPort ?? coordPort;
  const grpcPort = typeof grpcTarget === "string" ? c.ports?.find((p) => p.name === grpcTarget)?.containerPort : grpcTarget;
  if (flag(c, "listen")?.split(":").pop() !== String(grpcPort)) {
    errors.push(`${objectId(coordinator)}: --listen (${flag(c, "listen")}) must listen on the Service's grpc target port (${grpcPort})`);
  }
  for (const [container, obj] of [[sidecar, sts], [c, coordinator]]) {
    if (!container) continue;
    const port = Number(flag(container, "metrics_port"));
    const declared = (container.ports ?? []).find((p) => p.name === "metrics");
    if (!(port > 0) || declared?.containerPort !== port) errors.push(`${objectId(obj)}: container ${container.name} --metrics_port (${flag(container, "metrics_port")}) must be its 'metrics' containerPort`);
  }
  // Monitors.
  const pm = objects.find((o) => o.kind === "PodMonitor");
  if (!pm) errors.push("no PodMonitor for the shardd daemons");
  else {
    if (!selects(pm.spec.selector, podLabels)) errors.push(`${objectId(pm)}: selector does not match the trainer pods`);
    const names = podContainers(sts).flatMap((x) => (x.ports ?? []).map((p) => p.name));
    for (const ep of pm.spec.podMetricsEndpoints ?? []) if (!names.includes(ep.port)) errors.push(`${objectId(pm)}: port '${ep.port}' is not a named port of the trainer pods`);
    if (sidecar) errors.push(...checkRankLabel(pm, sidecar));
  }
  const sm = objects.find((o) => o.kind === "ServiceMonitor" || (o.kind === "PodMonitor" && o !== pm && selects(o.spec.selector, coordinator.spec.template.metadata.labels)));
  if (!sm) errors.push("no ServiceMonitor or PodMonitor for the coordinator");
  else if (sm.kind === "ServiceMonitor") {
    if (!selects(sm.spec.selector, coordSvc.metadata.labels ?? {})) errors.push(`${objectId(sm)}: selector does not match Service shardd-coordinator's labels`);
    for (const ep of sm.spec.endpoints ?? []) if (!coordSvc.spec.ports.some((p) => p.name === ep.port)) errors.push(`${objectId(sm)}: port '${ep.port}' is not a port of Service shardd-coordinator`);
  }
  errors.push(...checkStallAlertAfter(objects, c, objectId(coordinator)));
  // The alert waits longer than the lease.
  const rule = objects.find((o) => o.kind === "PrometheusRule");
  const missing = rule?.spec.groups.flatMap((g) => g.rules).find((r) => r.alert === "SharddMemberMissing");
  if (!missing) errors.push("PrometheusRule: no SharddMemberMissing alert");
  else if (parseDuration(missing.for ?? "0s") * 1000 <= Number(cm.data?.LEASE_MS)) {
    errors.push(`${objectId(rule)}: SharddMemberMissing 'for' (${missing.for}) must be longer than the lease (LEASE_MS ${cm.data?.LEASE_MS})`);
  }
  return errors;
}

// The coordinator's --stall_alert_after (SharddTrainingStalled's stall
// time), when it names a ConfigMap key through $(VAR), must be a duration
// absl parses ("15m", "1h30m", "0"): else the coordinator does not start.
export function checkStallAlertAfter(objects, container, id) {
  let value = flag(container, "stall_alert_after");
  if (value === undefined) {
    // SharddTrainingStalled compares the time without a committed step
    // with the stall time the coordinator exports: without the flag, the
    // 15m default, whatever the job's ConfigMap says.
    const port = flag(container, "metrics_port");
    if (port === undefined || Number(port) === 0) return [];
    return [`${id}: the coordinator serves /metrics but does not pass --stall_alert_after=$(STALL_ALERT_AFTER): SharddTrainingStalled would use the 15m default, not the job's STALL_ALERT_AFTER`];
  }
  const v = /^\$\((\w+)\)$/.exec(value);
  if (v) {
    const ref = (container.env ?? []).find((e) => e.name === v[1])?.valueFrom?.configMapKeyRef;
    const cm = ref && objects.find((o) => o.kind === "ConfigMap" && o.metadata.name === ref.name);
    if (!cm || cm.data?.[ref.key] === undefined) return [`${id}: --stall_alert_after=${value}: ${v[1]} is not a key of a deployed ConfigMap`];
    value = cm.data[ref.key];
  }
  if (!/^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$/.test(value)) return [`${id}: --stall_alert_after '${value}' is no duration (e.g. 15m, 1h30m; 0 turns the alert off)`];
  return [];
}

// Seconds of an absl duration flag value ("60s", "1m30s", "1.5m", "0").
export function parseAbslDuration(d) {
  if (d === "0") return 0;
  const units = { ns: 1e-9, us: 1e-6, ms: 0.001, s: 1, m: 60, h: 3600 };
  let total = 0;
  let end = 0;
  const re = /(\d+(?:\.\d+)?)(ns|us|ms|s|m|h)/gy;
  let m;
  while ((m = re.exec(d)) !== null) {
    total += Number(m[1]) * units[m[2]];
    end = re.lastIndex;
  }
  if (end !== d.length || d.length === 0) throw new Error(`'${d}' is not a duration (e.g. 60s, 1m30s; 0: off)`);
  return total;
}

// The coordinator's --failed_report_wait when the flag is not given.
export const FAILED_REPORT_WAIT_DEFAULT = "60s";
// Kubernetes' terminationGracePeriodSeconds when a pod does not set it.
const DEFAULT_GRACE_S = 30;
// Prometheus Operator's scrape interval of an endpoint without one.
const DEFAULT_SCRAPE_INTERVAL = "30s";
// What the coordinator needs after --failed_report_wait to stop its servers
// (2 s for in-flight calls) and exit, with room to spare.
export const FAILED_REPORT_SHUTDOWN_S = 10;

// The coordinator of a failed job holds its exit, at most
// --failed_report_wait from the failure, until /metrics has been scraped
// once (else SharddJobFailed may never see shardd_coordinator_job_failed =
// 1), also after the SIGTERM with which Kubernetes deletes a failed
// JobSet's pods. So the coordinator pod's terminationGracePeriodSeconds
// must outlast the wait (by FAILED_REPORT_SHUTDOWN_S), or the kubelet
// SIGKILLs it before the scrape; and the wait must span two scrape
// intervals of every monitor of the coordinator, or no scrape may come.
export function checkFailedReportWait(objects) {
  const t = coordinatorTemplate(objects);
  const c = t && (t.spec.containers ?? []).find((x) => x.name === "coordinator");
  if (!c) return [];
  const port = flag(c, "metrics_port");
  if (port === undefined || Number(port) === 0) return [];  // No /metrics to wait for.
  const raw = flag(c, "failed_report_wait") ?? FAILED_REPORT_WAIT_DEFAULT;
  let wait;
  try {
    wait = parseAbslDuration(raw);
  } catch (e) {
    return [`${t.id}: coordinator --failed_report_wait: ${e.message}`];
  }
  if (wait === 0) return [];
  const errors = [];
  const grace = t.spec.terminationGracePeriodSeconds;
  const effective = grace ?? DEFAULT_GRACE_S;
  if (!(effective >= wait + FAILED_REPORT_SHUTDOWN_S)) {
    errors.push(`${t.id}: terminationGracePeriodSeconds (${grace ?? `unset: ${DEFAULT_GRACE_S}`}) must be at least the coordinator's --failed_report_wait (${raw}) + ${FAILED_REPORT_SHUTDOWN_S} s, or a failed job's coordinator is killed before /metrics reports the failure`);
  }
  const services = objects.filter((o) => o.kind === "Service" && selectorMatches({ matchLabels: o.spec?.selector ?? {} }, t.labels) && Object.keys(o.spec?.selector ?? {}).length > 0);
  const intervals = [];
  for (const m of objects) {
    if (m.kind === "PodMonitor" && selectorMatches(m.spec.selector, t.labels)) {
      intervals.push(...(m.spec.podMetricsEndpoints ?? []).map((ep) => [m, ep.interval ?? DEFAULT_SCRAPE_INTERVAL]));
    } else if (m.kind === "ServiceMonitor" && services.some((svc) => selectorMatches(m.spec.selector, svc.metadata.labels ?? {}))) {
      intervals.push(...(m.spec.endpoints ?? []).map((ep) => [m, ep.interval ?? DEFAULT_SCRAPE_INTERVAL]));
    }
  }
  for (const [m, interval] of intervals) {
    if (wait < 2 * parseDuration(interval)) {
      errors.push(`${t.id}: the coordinator's --failed_report_wait (${raw}) must be at least twice ${objectId(m)}'s scrape interval (${interval}), or the failure may not be scraped before the coordinator exits`);
    }
  }
  return errors;
}

// The Prometheus meta label of a pod field (metadata.labels['K'] or
// metadata.annotations['K']) in Kubernetes service discovery.
export function podMetaLabel(fieldPath) {
  const m = /^metadata\.(labels|annotations)\['([^']+)'\]$/.exec(fieldPath ?? "");
  if (!m) return undefined;
  return `__meta_kubernetes_pod_${m[1] === "labels" ? "label" : "annotation"}_${m[2].replace(/[^a-zA-Z0-9_]/g, "_")}`;
}

// The dashboard's per-rank panels group by a `rank` target label
// (docs/metrics.md, "Target labels"): every endpoint of the daemons' PodMonitor
// copies it from the pod field the daemon's --rank comes from, so the
// label and the daemon's rank cannot disagree.
export function checkRankLabel(pm, sidecar) {
  const v = /^\$\((\w+)\)$/.exec(flag(sidecar, "rank") ?? "");
  // Kubernetes sets JOB_COMPLETION_INDEX from the annotation.
  const field = v && (v[1] === "JOB_COMPLETION_INDEX" ? "metadata.annotations['batch.kubernetes.io/job-completion-index']" : fieldRefOf(sidecar, v[1]));
  const source = podMetaLabel(field);
  if (!source) return [`${objectId(pm)}: the shardd container's --rank (${flag(sidecar, "rank")}) is no pod label or annotation, so no series can be labelled with it`];
  const errors = [];
  for (const ep of pm.spec.podMetricsEndpoints ?? []) {
    const r = (ep.relabelings ?? []).filter((x) => x.targetLabel === "rank");
    const ok = r.length === 1 && (r[0].action ?? "replace").toLowerCase() === "replace" &&
      JSON.stringify(r[0].sourceLabels) === JSON.stringify([source]) &&
      (r[0].regex ?? "(.*)") === "(.*)" && (r[0].replacement ?? "$1") === "$1";
    if (!ok) errors.push(`${objectId(pm)}: endpoint '${ep.port}' needs one relabeling {sourceLabels: [${source}], targetLabel: rank} (the pod field of the daemon's --rank; the per-rank panels group by it)`);
  }
  return errors;
}

// The exit statuses of daemon/core/exit_status.h that say "the job has
// FAILED" (terminal): shardd, the coordinator and client/example_trainer
// exit 3; client/python/examples/train_gpt.py and quickstart.py (the
// README's example) exit 2 on JobFailed.
export const EXIT_JOB_FAILED = 3;
export const EXIT_JOB_FAILED_PYTHON = 2;
export const EXIT_STATUS_HEADER = path.resolve(DEPLOY, "..", "daemon", "core", "exit_status.h");
export const PYTHON_TRAINER = path.resolve(DEPLOY, "..", "client", "python", "examples", "train_gpt.py");
export const PYTHON_QUICKSTART = path.resolve(DEPLOY, "..", "client", "python", "examples", "quickstart.py");

// The podFailurePolicy's exit codes are the ones the programs exit with:
// kExitJobFailed of daemon/core/exit_status.h is EXIT_JOB_FAILED, and every
// `except JobFailed` handler of each Python trainer (a path or a list)
// returns or sys.exit()s EXIT_JOB_FAILED_PYTHON (no test runs train_gpt.py
// into a failed job). A drift would turn the job's terminal state into
// retries of a job that cannot recover.
export function checkExitStatuses(header = EXIT_STATUS_HEADER, pythonTrainers = [PYTHON_TRAINER, PYTHON_QUICKSTART]) {
  const errors = [];
  const constant = /\bkExitJobFailed\s*=\s*(\d+)\s*;/.exec(fs.readFileSync(header, "utf8"));
  if (!constant) errors.push(`${header}: no kExitJobFailed = N;`);
  else if (Number(constant[1]) !== EXIT_JOB_FAILED) errors.push(`${header}: kExitJobFailed is ${constant[1]}, the podFailurePolicy's EXIT_JOB_FAILED ${EXIT_JOB_FAILED}`);
  for (const pythonTrainer of [pythonTrainers].flat()) errors.push(...checkPythonExitStatus(pythonTrainer));
  return errors;
}

function checkPythonExitStatus(pythonTrainer) {
  const errors = [];
  const lines = fs.readFileSync(pythonTrainer, "utf8").split("\n");
  let handlers = 0;
  lines.forEach((line, i) => {
    const m = /^(\s*)except\s+\(?[^:]*\bJobFailed\b[^:]*:/.exec(line);
    if (!m) return;
    ++handlers;
    const exits = [];
    for (let j = i + 1; j < lines.length; ++j) {
      if (lines[j].trim() !== "" && lines[j].search(/\S/) <= m[1].length) break;
      for (const e of lines[j].matchAll(/\breturn\s+(\d+)\b|\bsys\.exit\(\s*(\d+)\s*\)/g)) exits.push(Number(e[1] ?? e[2]));
    }
    if (exits.length === 0) errors.push(`${pythonTrainer}:${i + 1}: an except JobFailed that neither returns nor sys.exit()s a status`);
    for (const code of exits) if (code !== EXIT_JOB_FAILED_PYTHON) errors.push(`${pythonTrainer}:${i + 1}: JobFailed exits ${code}, the podFailurePolicy's EXIT_JOB_FAILED_PYTHON ${EXIT_JOB_FAILED_PYTHON}`);
  });
  if (handlers === 0) errors.push(`${pythonTrainer}: no except JobFailed handler`);
  return errors;
}

// The ConfigMap an env var of a container comes from (undefined when the
// var is not from a ConfigMap); null when that ConfigMap is not deployed.
function configMapOf(objects, container, envName, namespace) {
  const ref = (container.env ?? []).find((e) => e.name === envName)?.valueFrom?.configMapKeyRef;
  if (!ref) return undefined;
  return objects.find((o) => o.kind === "ConfigMap" && o.metadata.name === ref.name && o.metadata.namespace === namespace) ?? null;
}

function fieldRefOf(container, envName) {
  return (container.env ?? []).find((e) => e.name === envName)?.valueFrom?.fieldRef?.fieldPath;
}

// A podFailurePolicy rule that fails the Job on these exit codes of this
// container.
function failsJobOn(job, container, codes) {
  return (job?.podFailurePolicy?.rules ?? []).some((r) => r.action === "FailJob" && r.onExitCodes?.operator === "In" &&
    r.onExitCodes.containerName === container && codes.every((c) => r.onExitCodes.values.includes(c)));
}

// The JobSet form: a coordinator replicatedJob (one pod, index 0, the
// JobSet's coordinator) and a workers replicatedJob of W indexed pods whose
// completion index is the rank; success when every worker completes;
// the job's terminal exit status fails the Job (podFailurePolicy FailJob)
// and the JobSet (a FailJobSet rule on PodFailurePolicy); a disruption is
// ignored; a rank's retries are bounded; the daemons find the coordinator
// through the JobSet's annotation, the ConfigMap each container reads is
// deployed in the same namespace, and the monitors select the pods.
export function checkJobSet(objects) {
  const errors = [];
  const t = trainerTemplate(objects);
  const c = coordinatorTemplate(objects);
  if (!c || c.o !== t.o) return [`${t.id}: the coordinator must be a replicatedJob of the same JobSet (pods labelled app.kubernetes.io/name: shardd-coordinator)`];
  const js = t.o;
  const id = objectId(js);
  const ns = js.metadata.namespace;
  const sidecar = (t.spec.initContainers ?? []).find((x) => x.name === "shardd");
  const trainer = (t.spec.containers ?? []).find((x) => x.name === "trainer");
  const coord = (c.spec.containers ?? []).find((x) => x.name === "coordinator");
  if (!sidecar || !trainer || !coord) return [`${id}: needs containers shardd (init), trainer and coordinator`];
  // Every ConfigMap a container reads is deployed (a namePrefix renames
  // both, or neither).
  for (const tpl of [t, c]) {
    for (const x of [...(tpl.spec.initContainers ?? []), ...(tpl.spec.containers ?? [])]) {
      for (const e of x.env ?? []) {
        const ref = e.valueFrom?.configMapKeyRef;
        if (ref && !objects.some((o) => o.kind === "ConfigMap" && o.metadata.name === ref.name && o.metadata.namespace === ns)) {
          errors.push(`${tpl.id}: container ${x.name} env ${e.name} reads ConfigMap '${ref.name}', which is not deployed in its namespace`);
        }
      }
    }
  }
  const cm = configMapOf(objects, coord, "WORLD_SIZE", ns);
  if (!cm) return [...errors, `${c.id}: the coordinator's WORLD_SIZE must come from a deployed ConfigMap`];
  const w = Number(cm.data?.WORLD_SIZE);
  const f = Number(cm.data?.SHARDING_FACTOR);
  if (!(w >= 1) || !(f >= 1) || w % f !== 0) errors.push(`${objectId(cm)}: SHARDING_FACTOR (${cm.data?.SHARDING_FACTOR}) must divide WORLD_SIZE (${cm.data?.WORLD_SIZE})`);
  // Shape of the two Jobs.
  for (const [tpl, n] of [[t, w], [c, 1]]) {
    const job = tpl.job;
    if ((tpl.rj.replicas ?? 1) !== 1) errors.push(`${tpl.id}: replicas must be 1 (one Job; its pods are the ranks)`);
    if (job.completionMode !== "Indexed") errors.push(`${tpl.id}: completionMode must be Indexed (the completion index is the rank; a replacement keeps it)`);
    if (job.completions !== n || job.parallelism !== n) errors.push(`${tpl.id}: completions (${job.completions}) and parallelism (${job.parallelism}) must be ${n}${n === w ? ` (WORLD_SIZE of ${objectId(cm)})` : ""}`);
    if (tpl.spec.restartPolicy !== "Never") errors.push(`${tpl.id}: restartPolicy must be Never (podFailurePolicy requires it)`);
    if (!(job.podFailurePolicy?.rules ?? []).some((r) => r.action === "Ignore" && (r.onPodConditions ?? []).some((pc) => pc.type === "DisruptionTarget"))) {
      errors.push(`${tpl.id}: podFailurePolicy must Ignore DisruptionTarget (an evicted or preempted pod is replaced, not counted)`);
    }
  }
  if (!failsJobOn(t.job, "trainer", [EXIT_JOB_FAILED, EXIT_JOB_FAILED_PYTHON])) errors.push(`${t.id}: podFailurePolicy must FailJob on the trainer's exit codes ${EXIT_JOB_FAILED} and ${EXIT_JOB_FAILED_PYTHON} (the job has failed)`);
  if (!failsJobOn(t.job, "shardd", [EXIT_JOB_FAILED])) errors.push(`${t.id}: podFailurePolicy must FailJob on shardd's exit code ${EXIT_JOB_FAILED} (the job has failed)`);
  if (!failsJobOn(c.job, "coordinator", [EXIT_JOB_FAILED])) errors.push(`${c.id}: podFailurePolicy must FailJob on the coordinator's exit code ${EXIT_JOB_FAILED} (the job has failed)`);
  const perIndex = t.job.backoffLimitPerIndex;
  if (perIndex === undefined && t.job.backoffLimit === undefined) errors.push(`${t.id}: set backoffLimitPerIndex (retries of one rank) or backoffLimit`);
  if (perIndex !== undefined && t.job.maxFailedIndexes !== 0) errors.push(`${t.id}: maxFailedIndexes must be 0: a rank that exhausted its retries fails the job at once (the others cannot step without it)`);
  // The JobSet's policies.
  const sp = js.spec.successPolicy;
  if (sp?.operator !== "All" || JSON.stringify(sp?.targetReplicatedJobs) !== JSON.stringify([t.rj.name])) {
    errors.push(`${id}: successPolicy must be operator All over targetReplicatedJobs [${t.rj.name}] (complete when every trainer has exited 0)`);
  }
  const fp = js.spec.failurePolicy;
  if (fp?.maxRestarts === undefined) errors.push(`${id}: failurePolicy.maxRestarts must be set`);
  if (!(fp?.rules ?? []).some((r) => r.action === "FailJobSet" && (r.onJobFailureReasons ?? []).includes("PodFailurePolicy") && !r.targetReplicatedJobs)) {
    errors.push(`${id}: failurePolicy needs a FailJobSet rule on PodFailurePolicy (the job's terminal state must not restart the JobSet)`);
  }
  // Addresses.
  const sc = js.spec.coordinator;
  if (sc?.replicatedJob !== c.rj.name || (sc.jobIndex ?? 0) !== 0 || (sc.podIndex ?? 0) !== 0) errors.push(`${id}: spec.coordinator must name replicatedJob ${c.rj.name}, job 0, pod 0`);
  if (js.spec.network?.enableDNSHostnames === false) errors.push(`${id}: network.enableDNSHostnames must not be false (the coordinator's address is its pod hostname)`);
  if (js.spec.network?.publishNotReadyAddresses === false) errors.push(`${id}: network.publishNotReadyAddresses must not be false (replacements recover before they are ready)`);
  const listen = portOf(flag(coord, "listen"));
  const coordinatorFlag = flag(sidecar, "coordinator") ?? "";
  const m = /^\$\((\w+)\):(\d+)$/.exec(coordinatorFlag);
  if (!m || fieldRefOf(sidecar, m[1]) !== "metadata.annotations['jobset.sigs.k8s.io/coordinator']" || Number(m[2]) !== listen) {
    errors.push(`${t.id}: shardd --coordinator (${coordinatorFlag}) must be $(VAR):${listen}, VAR from the pod's annotation jobset.sigs.k8s.io/coordinator (a namePrefix then cannot leave a stale name in it)`);
  }
  const INDEX = ["metadata.annotations['batch.kubernetes.io/job-completion-index']", "metadata.labels['batch.kubernetes.io/job-completion-index']"];
  for (const x of [sidecar, trainer]) {
    const rank = /^\$\((\w+)\)$/.exec(flag(x, "rank") ?? "");
    if (!rank || !(INDEX.includes(fieldRefOf(x, rank[1])) || rank[1] === "JOB_COMPLETION_INDEX")) {
      errors.push(`${t.id}: container ${x.name} --rank (${flag(x, "rank")}) must be the pod's completion index`);
    }
  }
  for (const [x, tpl] of [[sidecar, t], [coord, c]]) {
    const port = Number(flag(x, "metrics_port"));
    const declared = (x.ports ?? []).find((p) => p.name === "metrics");
    if (!(port > 0) || declared?.containerPort !== port) errors.push(`${tpl.id}: container ${x.name} --metrics_port (${flag(x, "metrics_port")}) must be its 'metrics' containerPort`);
  }
  // Monitors: one selects the trainer pods, one the coordinator pod.
  const monitors = objects.filter((o) => o.kind === "PodMonitor" && o.metadata.namespace === ns);
  for (const [tpl, what] of [[t, "trainer"], [c, "coordinator"]]) {
    const pm = monitors.find((o) => selectorMatches(o.spec.selector, tpl.labels));
    if (!pm) {
      errors.push(`no PodMonitor selects the ${what} pods (${tpl.id})`);
      continue;
    }
    const names = [...(tpl.spec.initContainers ?? []), ...(tpl.spec.containers ?? [])].flatMap((x) => (x.ports ?? []).map((p) => p.name));
    for (const ep of pm.spec.podMetricsEndpoints ?? []) if (!names.includes(ep.port)) errors.push(`${objectId(pm)}: port '${ep.port}' is not a named port of the ${what} pods`);
    if (what === "trainer") errors.push(...checkRankLabel(pm, sidecar));
  }
  errors.push(...checkStallAlertAfter(objects, coord, c.id));
  const rule = objects.find((o) => o.kind === "PrometheusRule");
  const missing = rule?.spec.groups.flatMap((g) => g.rules).find((r) => r.alert === "SharddMemberMissing");
  if (missing && parseDuration(missing.for ?? "0s") * 1000 <= Number(cm.data?.LEASE_MS)) {
    errors.push(`${objectId(rule)}: SharddMemberMissing 'for' (${missing.for}) must be longer than the lease (LEASE_MS ${cm.data?.LEASE_MS})`);
  }
  return errors;
}

// A GPU from the device plugin (nvidia.com/gpu), for clusters without DRA:
// the plugin gives the device to one container only, so shardd (which
// allocates the device buffers and runs NCCL) asks for it, writes the
// device the plugin gave it (NVIDIA_VISIBLE_DEVICES) into the shared
// volume, and the trainer, which asks for no GPU and sees the node's GPUs
// (NVIDIA_VISIBLE_DEVICES=all), selects that one device by UUID
// (CUDA_VISIBLE_DEVICES) before it starts CUDA. See deploy/README.md.
export const GPU_FILE = "gpu-uuid";
function checkDevicePlugin(t, sidecar, trainer) {
  const errors = [];
  const gpu = (c) => Number(c.resources?.limits?.["nvidia.com/gpu"] ?? 0);
  if (gpu(sidecar) !== 1 || gpu(trainer) !== 0) errors.push(`${t.id}: with the device plugin, shardd asks for nvidia.com/gpu: 1 and the trainer for none (each request would be a device of its own)`);
  const shmDir = flag(sidecar, "shm_dir");
  const file = `${shmDir}/${GPU_FILE}`;
  const script = (c) => [...(c.command ?? []), ...(c.args ?? [])].join(" ");
  if (!script(sidecar).includes(`"$NVIDIA_VISIBLE_DEVICES" > ${file}`)) errors.push(`${t.id}: shardd must write its NVIDIA_VISIBLE_DEVICES to ${file} before it starts`);
  if (!script(trainer).includes(`CUDA_VISIBLE_DEVICES="$(cat ${file})"`)) errors.push(`${t.id}: the trainer must set CUDA_VISIBLE_DEVICES from ${file}`);
  if ((trainer.env ?? []).find((e) => e.name === "NVIDIA_VISIBLE_DEVICES")?.value !== "all") errors.push(`${t.id}: the trainer needs NVIDIA_VISIBLE_DEVICES=all to see the sidecar's device`);
  return errors;
}

// The port of a HOST:PORT flag value ("[::]:7072" too); NaN when absent.
function portOf(hostPort) {
  return hostPort === undefined ? NaN : Number(hostPort.slice(hostPort.lastIndexOf(":") + 1));
}

// The host of a HOST:PORT flag value, without IPv6 brackets.
function hostOf(hostPort) {
  return hostPort.slice(0, hostPort.lastIndexOf(":")).replace(/^\[(.*)\]$/, "$1");
}

function octal(mode) {
  return `0${mode.toString(8)}`;
}

// Mutual TLS (--tls_cert): every container that turns it on also gives the
// key and the CA (without --tls_ca the servers ask for no client
// certificate), serves health in plaintext on --health_listen and points
// every gRPC probe there (the kubelet cannot present a certificate, and the
// TLS ports refuse plaintext), and reads the PEM files from a read-only
// Secret mount its user can read. A daemon's --peer_listen host is what
// peers and the coordinator dial and verify against the certificate's
// subject alternative names, so it must be a name a shared certificate can
// hold, not a pod IP. Containers without --tls_cert are not checked.
export function checkTls(objects) {
  const errors = [];
  for (const { spec, id } of allTemplates(objects)) {
    const pod = spec.securityContext ?? {};
    for (const c of [...(spec.initContainers ?? []), ...(spec.containers ?? [])]) {
      if (flag(c, "tls_cert") === undefined) continue;
      const where = `${id}: container ${c.name}`;
      for (const [name, why] of [["tls_key", "the certificate's private key"], ["tls_ca", "without it the servers do not ask for client certificates: TLS, but not mutual"]]) {
        if (flag(c, name) === undefined) errors.push(`${where}: --tls_cert without --${name} (${why})`);
      }
      // Probes.
      const tlsPorts = new Map();
      for (const name of ["listen", "peer_listen", "listen_tcp"]) {
        const port = portOf(flag(c, name));
        if (port > 0) tlsPorts.set(port, name);
      }
      const health = flag(c, "health_listen");
      const healthPort = portOf(health);
      if (health === undefined) {
        errors.push(`${where}: --tls_cert without --health_listen: the kubelet's plaintext gRPC probes cannot reach a TLS port`);
      } else {
        for (const kind of ["startupProbe", "readinessProbe", "livenessProbe"]) {
          const port = c[kind]?.grpc?.port;
          if (port === undefined || port === healthPort) continue;
          const tls = tlsPorts.has(port) ? ` is the TLS port of --${tlsPorts.get(port)}, which refuses the kubelet's plaintext probe;` : "";
          errors.push(`${where}: ${kind}.grpc.port ${port}${tls} must be the --health_listen port ${healthPort}`);
        }
      }
      // The PEM files: a read-only Secret mount the container's user reads.
      for (const name of ["tls_cert", "tls_key", "tls_ca"]) {
        const file = flag(c, name);
        if (file === undefined) continue;
        const mount = (c.volumeMounts ?? [])
          .filter((m) => file.startsWith(`${m.mountPath.replace(/\/$/, "")}/`))
          .sort((a, b) => b.mountPath.length - a.mountPath.length)[0];
        if (!mount) {
          errors.push(`${where}: --${name} ${file} is not under a volumeMount (mount the TLS Secret read-only)`);
          continue;
        }
        const volume = (spec.volumes ?? []).find((x) => x.name === mount.name);
        if (!volume?.secret) {
          errors.push(`${where}: --${name} ${file} is under mount ${mount.mountPath} of volume '${mount.name}', which is not a Secret`);
          continue;
        }
        if (mount.readOnly !== true) errors.push(`${where}: --${name} ${file}: mount ${mount.mountPath} must be readOnly`);
        // The binaries re-read the files (--tls_refresh_interval): a renewal
        // reaches them only through a whole-volume mount; the kubelet never
        // updates a subPath mount.
        if (mount.subPath !== undefined || mount.subPathExpr !== undefined) {
          errors.push(`${where}: --${name} ${file}: mount ${mount.mountPath} uses subPath, which the kubelet never updates: a renewed certificate would not reach the process; mount the whole Secret`);
        }
        // Secret files belong to root (group fsGroup when the pod has one).
        const key = file.slice(mount.mountPath.replace(/\/$/, "").length + 1);
        const item = (volume.secret.items ?? []).find((i) => i.path === key);
        const mode = item?.mode ?? volume.secret.defaultMode ?? 0o644;
        const uid = c.securityContext?.runAsUser ?? pod.runAsUser;
        const readable = uid === 0 || (mode & 0o004) !== 0 || (pod.fsGroup !== undefined && (mode & 0o040) !== 0);
        if (!readable) {
          errors.push(`${where}: --${name} ${file}: Secret volume '${mount.name}' mode ${octal(mode)} is not readable by uid ${uid} (the files belong to root; give the pod an fsGroup and mode 0440)`);
        }
      }
      // What peers dial.
      const peer = flag(c, "peer_listen");
      if (peer !== undefined) {
        const host = hostOf(peer);
        if (host === "$(POD_IP)" || /^[0-9.]+$/.test(host) || host.includes(":")) {
          errors.push(`${where}: --peer_listen host ${host}: peers and the coordinator verify the dialled host against the certificate, and a shared certificate cannot name every pod IP; use the pod's DNS name under the headless Service`);
        }
      }
    }
  }
  return errors;
}

// ---------------------------------------------------------------------------
// NetworkPolicies: who may connect to each port a pod opens.

// Who must be able to connect to a port, by what opens it: a flag of the
// binaries (`--NAME`, its port) or, for a port no flag opens, the
// containerPort's name (`port NAME`). Peers: "trainer" (the job's trainer
// pods), "coordinator" (its coordinator pod), "monitoring" (Prometheus'
// namespace, one namespaceSelector). An empty list: no pod may connect; the
// kubelet's probes come from the pod's node, which a NetworkPolicy does not
// block. A port that nothing here names is an error: add its NetworkPolicy
// rule and its entry.
export const PORT_PEERS = {
  "--listen": ["trainer"],                   // coordinator: Coordinator API
  "--peer_listen": ["trainer", "coordinator"],  // shardd: Peer API (and Peer.Probe)
  "--metrics_port": ["monitoring"],          // both: /metrics
  "--health_listen": [],                     // both: plaintext health, the kubelet's
  "--listen_tcp": [],                        // shardd: Trainer API over TCP (own pod)
};

// Gloo's TCP transport (the host of --peer_listen) listens on one port per
// pair of ranks, picked by the kernel: the ephemeral range of the pod's
// network namespace (net.ipv4.ip_local_port_range, 32768-60999 in a new
// namespace unless the pod sets the sysctl). Only the daemon's own kind of
// pod (its peers) may connect there, and since no fixed list of ports is
// possible, those peers may reach every port of the pod.
export const EPHEMERAL_PORTS = [32768, 60999];

function ephemeralRange(spec) {
  const s = (spec.securityContext?.sysctls ?? []).find((x) => x.name === "net.ipv4.ip_local_port_range");
  const m = /^\s*(\d+)\s+(\d+)\s*$/.exec(s?.value ?? "");
  return m ? [Number(m[1]), Number(m[2])] : EPHEMERAL_PORTS;
}

// Does a label selector (matchLabels, matchExpressions) select these labels?
export function selectorMatches(sel, labels = {}) {
  if (!sel) return false;
  for (const [k, v] of Object.entries(sel.matchLabels ?? {})) if (labels[k] !== v) return false;
  for (const e of sel.matchExpressions ?? []) {
    const has = Object.hasOwn(labels, e.key);
    const ok = {
      In: () => has && (e.values ?? []).includes(labels[e.key]),
      NotIn: () => !has || !(e.values ?? []).includes(labels[e.key]),
      Exists: () => has,
      DoesNotExist: () => !has,
    }[e.operator];
    if (!ok || !ok()) return false;
  }
  return true;
}

function emptySelector(sel) {
  return Object.keys(sel?.matchLabels ?? {}).length === 0 && (sel?.matchExpressions ?? []).length === 0;
}

// The job's workloads: every pod template, with the peer class its pods are
// ("trainer", "coordinator", or KIND/NAME for any other).
function workloads(objects) {
  const out = [];
  for (const t of allTemplates(objects)) {
    const name = t.labels["app.kubernetes.io/name"];
    const cls = name === "shardd-trainer" ? "trainer" : name === "shardd-coordinator" ? "coordinator" : t.id;
    out.push({ o: t.o, id: t.id, spec: t.spec, cls, labels: t.labels, ns: t.o.metadata.namespace });
  }
  return out;
}

// The peer classes one `from` list admits. Peers in another namespace are
// "monitoring" (the selector is returned too, so that all agree).
function peerClasses(from, policy, all) {
  if (!from || from.length === 0) return [{ cls: "anywhere" }];
  const out = [];
  for (const p of from) {
    if (p.ipBlock) {
      out.push({ cls: `ipBlock ${p.ipBlock.cidr}` });
    } else if (p.namespaceSelector) {
      if (emptySelector(p.namespaceSelector)) out.push({ cls: p.podSelector && !emptySelector(p.podSelector) ? `pods ${JSON.stringify(p.podSelector)} of every namespace` : "every namespace" });
      else out.push({ cls: "monitoring", selector: JSON.stringify({ ns: p.namespaceSelector, pods: p.podSelector ?? null }) });
    } else if (p.podSelector) {
      const matched = all.filter((w) => w.ns === policy.metadata.namespace && selectorMatches(p.podSelector, w.labels));
      for (const w of matched) out.push({ cls: w.cls });
      if (emptySelector(p.podSelector)) out.push({ cls: "every pod of the namespace" });
      else if (matched.length === 0) out.push({ cls: `pods ${JSON.stringify(p.podSelector)} (no pod of the job)` });
    }
  }
  return out;
}

function rulePortMatches(ports, port) {
  if (!ports || ports.length === 0) return true;
  return ports.some((p) => {
    if ((p.protocol ?? "TCP") !== port.protocol) return false;
    if (p.port === undefined) return true;
    if (typeof p.port === "string" && !/^\d+$/.test(p.port)) return p.port === port.name;
    const lo = Number(p.port);
    return port.number >= lo && port.number <= (p.endPort ?? lo);
  });
}

// The ingress policies of a workload's pods (ingress rules of policies in
// its namespace whose podSelector selects them), or null when none does:
// then every source may connect.
function ingressRules(w, policies) {
  const selecting = policies.filter((p) => p.metadata.namespace === w.ns && selectorMatches(p.spec?.podSelector ?? {}, w.labels) &&
    (p.spec?.policyTypes ?? ["Ingress"]).includes("Ingress"));
  return selecting.length === 0 ? null : selecting.flatMap((p) => (p.spec.ingress ?? []).map((rule) => ({ rule, policy: p })));
}

// What a broader peer class also lets in.
const COVERS = {
  anywhere: () => true,
  "every namespace": () => true,
  "every pod of the namespace": (c) => c === "trainer" || c === "coordinator",
};

function admits(got, cls) {
  return got.has(cls) || [...got].some((g) => COVERS[g]?.(cls));
}

// The peer classes admitted to one port of a workload's pods.
function admitted(w, rules, port, all, selectors) {
  if (rules === null) return new Set(["anywhere"]);
  const out = new Set();
  for (const { rule, policy } of rules) {
    if (!rulePortMatches(rule.ports, port)) continue;
    for (const c of peerClasses(rule.from, policy, all)) {
      out.add(c.cls);
      if (c.selector) selectors.add(c.selector);
    }
  }
  return out;
}

// Every port a workload's pods open, with who must and who may connect:
// the listen flags of PORT_PEERS, every containerPort and probe port (each
// must be one of those, or named in PORT_PEERS), and Gloo's ephemeral range
// where a container has --peer_listen. Returns [ports, errors].
function openPorts(w) {
  const id = w.id;
  const ports = [];
  const errors = [];
  const containers = [...(w.spec.initContainers ?? []), ...(w.spec.containers ?? [])];
  let gloo = false;
  for (const c of containers) {
    for (const [key, peers] of Object.entries(PORT_PEERS)) {
      if (!key.startsWith("--")) continue;
      const name = key.slice(2);
      const value = flag(c, name);
      if (value === undefined) continue;
      const number = name === "metrics_port" ? Number(value) : portOf(value);
      if (name === "metrics_port" && number === 0) continue;  // off
      if (!(number > 0 && number < 65536)) {
        errors.push(`${id}: container ${c.name} --${name}=${value}: a NetworkPolicy can only cover a fixed port`);
        continue;
      }
      const cp = (c.ports ?? []).find((p) => p.containerPort === number);
      ports.push({ number, protocol: "TCP", name: cp?.name, what: `--${name} of container ${c.name}`, required: peers });
    }
    if (flag(c, "peer_listen") !== undefined) gloo = true;
  }
  const known = (n) => ports.some((p) => p.number === n);
  for (const c of containers) {
    for (const cp of c.ports ?? []) {
      if (known(cp.containerPort)) continue;
      const peers = PORT_PEERS[`port ${cp.name}`];
      if (peers === undefined) {
        errors.push(`${id}: containerPort ${cp.containerPort}${cp.name ? ` '${cp.name}'` : ""} of container ${c.name} is opened by no flag in PORT_PEERS and its name is not there either: nothing says who may connect (add its NetworkPolicy rule and its PORT_PEERS entry in deploy/validate/validate.mjs)`);
      } else {
        ports.push({ number: cp.containerPort, protocol: cp.protocol ?? "TCP", name: cp.name, what: `containerPort '${cp.name}' of container ${c.name}`, required: peers });
      }
    }
    for (const kind of ["startupProbe", "readinessProbe", "livenessProbe"]) {
      const p = c[kind];
      let port = p?.grpc?.port ?? p?.httpGet?.port ?? p?.tcpSocket?.port;
      if (port === undefined) continue;
      if (typeof port === "string") port = containers.flatMap((x) => x.ports ?? []).find((x) => x.name === port)?.containerPort;
      if (!known(port) && !(c.ports ?? []).some((x) => x.containerPort === port && PORT_PEERS[`port ${x.name}`])) {
        errors.push(`${id}: container ${c.name} ${kind} port ${port} is opened by no flag in PORT_PEERS: nothing says who may connect`);
      }
    }
  }
  const range = gloo ? ephemeralRange(w.spec) : null;
  return [ports, errors, range];
}

function sorted(set) {
  return [...set].sort();
}

// For every workload and every port its pods open: the NetworkPolicies
// admit every peer that must connect and nobody else. Trainer pods (where
// Gloo listens on ephemeral ports) may also admit each other on any port;
// on Gloo's range they must, and only them.
export function checkNetworkPolicies(objects) {
  const errors = [];
  const policies = objects.filter((o) => o.kind === "NetworkPolicy");
  const all = workloads(objects);
  const selectors = new Set();
  for (const w of all) {
    const id = w.id;
    const rules = ingressRules(w, policies);
    if (rules === null) errors.push(`${id}: no NetworkPolicy selects its pods: every port is open to anyone`);
    const [ports, portErrors, range] = openPorts(w);
    errors.push(...portErrors);
    const extraOk = range ? [w.cls] : [];
    for (const port of ports) {
      const got = admitted(w, rules, port, all, selectors);
      const missing = port.required.filter((c) => !admits(got, c));
      const extra = sorted(got).filter((c) => !port.required.includes(c) && !extraOk.includes(c));
      const where = `${id}: port ${port.number} (${port.what})`;
      if (missing.length > 0) errors.push(`${where}: no NetworkPolicy admits ${missing.join(", ")}`);
      if (extra.length > 0) errors.push(`${where}: NetworkPolicies also admit ${extra.join(", ")}; only ${[...port.required, ...extraOk].join(", ") || "the kubelet"} may connect`);
    }
    if (range) {
      // Gloo: every port of the range, only the daemon's peers.
      const missing = new Map();
      const extra = new Map();
      for (let n = range[0]; n <= range[1]; n++) {
        if (ports.some((p) => p.number === n)) continue;
        const got = admitted(w, rules, { number: n, protocol: "TCP" }, all, selectors);
        if (!admits(got, w.cls) && !missing.has(w.cls)) missing.set(w.cls, n);
        for (const c of got) if (c !== w.cls && !extra.has(c)) extra.set(c, n);
      }
      const where = `${id}: Gloo's ephemeral ports ${range[0]}-${range[1]} (the --peer_listen host)`;
      for (const [c, n] of missing) errors.push(`${where}: no NetworkPolicy admits ${c} (port ${n} for one)`);
      for (const [c, n] of extra) errors.push(`${where}: NetworkPolicies also admit ${c} (port ${n} for one); only ${w.cls} may connect`);
    }
  }
  if (selectors.size > 1) errors.push(`the metrics ports admit ${selectors.size} different namespace selectors (${sorted(selectors).join(", ")}); use one for Prometheus' namespace`);
  return errors;
}

// ---------------------------------------------------------------------------
// cert-manager: the Certificate behind each TLS Secret the pods mount.

const CERT_MANAGER = "cert-manager.io";

function certManager(objects, kind) {
  return objects.filter((o) => o.kind === kind && groupOf(o.apiVersion) === CERT_MANAGER);
}

// Is `host` covered by one of the certificate's DNS names (a `*.` wildcard
// covers exactly one leftmost label, as gRPC's hostname verification does)?
// A needed wildcard (every pod under a name) needs that wildcard itself.
function dnsCovers(dnsNames, host) {
  if (dnsNames.includes(host)) return true;
  if (host.startsWith("*.")) return false;
  const rest = host.slice(host.indexOf(".") + 1);
  return host.includes(".") && dnsNames.includes(`*.${rest}`);
}

// The host the JobSet controller writes into every pod's annotation
// jobset.sigs.k8s.io/coordinator: the coordinator pod's hostname under the
// JobSet's subdomain (its name unless network.subdomain says otherwise).
function jobSetCoordinatorHost(js) {
  const sc = js.spec.coordinator ?? {};
  const subdomain = js.spec.network?.subdomain ?? js.metadata.name;
  return `${js.metadata.name}-${sc.replicatedJob}-${sc.jobIndex ?? 0}-${sc.podIndex ?? 0}.${subdomain}`;
}

// Fields of the downward API that differ from pod to pod of one template.
const PER_POD_FIELDS = [
  "metadata.name",
  "metadata.annotations['batch.kubernetes.io/job-completion-index']",
  "metadata.labels['batch.kubernetes.io/job-completion-index']",
  "metadata.labels['batch.kubernetes.io/job-name']",
];

// A $(VAR) in an argument of a container of `o`, as the pod expands it: a
// per-pod field (the pod's name, its completion index or Job) makes its
// DNS label any label (the wildcard), $(POD_NAMESPACE) is the object's
// namespace, a JobSet's name label and coordinator annotation what its
// controller writes, a literal env value itself; anything else is unknown
// (null).
function expandHost(host, c, namespace, o) {
  let unknown = false;
  const out = host.replace(/\$\((\w+)\)/g, (_, v) => {
    const env = (c.env ?? []).find((e) => e.name === v);
    const field = env?.valueFrom?.fieldRef?.fieldPath;
    if (PER_POD_FIELDS.includes(field)) return "*";
    if (field === "metadata.namespace" && namespace) return namespace;
    if (o?.kind === "JobSet" && field === "metadata.labels['jobset.sigs.k8s.io/jobset-name']") return o.metadata.name;
    if (o?.kind === "JobSet" && field === "metadata.annotations['jobset.sigs.k8s.io/coordinator']") return jobSetCoordinatorHost(o);
    if (env?.value !== undefined) return env.value;
    unknown = true;
    return "";
  });
  if (unknown) return null;
  return out.split(".").map((label) => (label.includes("*") ? "*" : label)).join(".");
}

// cert-manager Certificates: each issued by a deployed Issuer (a CA
// Issuer's Secret, when a Certificate here makes it, comes from an isCA
// Certificate); and the Certificate that makes a TLS Secret the pods mount
// names every host the binaries dial (the --coordinator hosts for the
// coordinator's Secret, the --peer_listen host pattern for the daemons') and
// allows server and client auth (every binary is both). Secrets that no
// Certificate here makes (openssl, your own tooling) are not checked.
export function checkCertificates(objects) {
  const errors = [];
  const certs = certManager(objects, "Certificate");
  const issuers = certManager(objects, "Issuer");
  for (const cert of certs) {
    const ref = cert.spec?.issuerRef ?? {};
    if ((ref.group ?? CERT_MANAGER) !== CERT_MANAGER || (ref.kind ?? "Issuer") !== "Issuer") continue;  // ClusterIssuer, external issuers
    if (!issuers.some((i) => i.metadata.name === ref.name && i.metadata.namespace === cert.metadata.namespace)) {
      errors.push(`${objectId(cert)}: issuerRef names Issuer '${ref.name}', which is not deployed in its namespace`);
    }
  }
  for (const issuer of issuers) {
    const caSecret = issuer.spec?.ca?.secretName;
    const ca = caSecret && certs.find((c) => c.spec?.secretName === caSecret && c.metadata.namespace === issuer.metadata.namespace);
    if (ca && ca.spec.isCA !== true) errors.push(`${objectId(issuer)}: signs with Secret ${caSecret}, made by ${objectId(ca)}, which is not a CA (isCA: true)`);
  }
  const dialled = new Set();  // --coordinator hosts
  for (const o of objects) {
    for (const c of podContainers(o)) {
      if (flag(c, "coordinator") === undefined) continue;
      const host = hostOf(flag(c, "coordinator"));
      dialled.add(expandHost(host, c, o.metadata.namespace, o) ?? host);
    }
  }
  for (const { o, spec, id } of allTemplates(objects)) {
    for (const c of [...(spec.initContainers ?? []), ...(spec.containers ?? [])]) {
      const file = flag(c, "tls_cert");
      if (file === undefined) continue;
      const where = `${id}: container ${c.name}`;
      const mount = (c.volumeMounts ?? []).find((m) => file.startsWith(`${m.mountPath.replace(/\/$/, "")}/`));
      const secret = (spec.volumes ?? []).find((v) => v.name === mount?.name)?.secret?.secretName;
      const cert = certs.find((x) => x.spec?.secretName === secret && x.metadata.namespace === o.metadata.namespace);
      if (!secret) continue;
      if (!cert) {
        const elsewhere = certs.find((x) => x.spec?.secretName === secret);
        if (elsewhere) errors.push(`${where}: Secret ${secret} is made by ${objectId(elsewhere)}, in ${elsewhere.metadata.namespace ?? "no namespace (kubectl's current one)"}, not in the pod's namespace ${o.metadata.namespace}`);
        continue;
      }
      const names = cert.spec.dnsNames ?? [];
      const needed = [];
      if (flag(c, "listen") !== undefined) needed.push(...[...dialled].map((h) => [h, "--coordinator of the daemons"]));
      if (flag(c, "peer_listen") !== undefined) {
        const host = expandHost(hostOf(flag(c, "peer_listen")), c, o.metadata.namespace, o);
        if (host === null) errors.push(`${where}: --peer_listen ${flag(c, "peer_listen")}: cannot tell which host peers dial`);
        else needed.push([host, "--peer_listen"]);
      }
      for (const [host, why] of needed) {
        if (!dnsCovers(names, host)) errors.push(`${objectId(cert)}: dnsNames do not cover ${host} (${why} of ${where}), which clients dial and verify`);
      }
      const usages = cert.spec.usages;
      if (usages !== undefined) {
        for (const u of ["server auth", "client auth"]) {
          if (!usages.includes(u)) errors.push(`${objectId(cert)}: usages lack '${u}' (${where} serves and dials with Secret ${secret})`);
        }
      }
    }
  }
  return errors;
}

// Seconds of a Prometheus duration such as 1m30s.
export function parseDuration(d) {
  const units = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400, w: 604800, y: 31536000 };
  let total = 0;
  const re = /(\d+)(ms|s|m|h|d|w|y)/gy;
  let m;
  let end = 0;
  while ((m = re.exec(d)) !== null) {
    total += Number(m[1]) * units[m[2]];
    end = re.lastIndex;
  }
  if (end !== d.length || d.length === 0) throw new Error(`'${d}' is not a Prometheus duration`);
  return total;
}

// In an overlay, every image comes from a registry with a tag or digest.
export function checkImagesPinned(objects) {
  const errors = [];
  for (const o of objects) {
    for (const c of podContainers(o)) {
      if (!c.image.includes("/") || c.image === imageName(c.image) || c.image.endsWith(":latest")) {
        errors.push(`${objectId(o)}: container ${c.name} image '${c.image}' must name a registry and a tag or digest`);
      }
    }
  }
  return errors;
}

// ---------------------------------------------------------------------------
// Alert rules and dashboard.

// The metric types from docs/metrics.md's tables: name -> type.
export function metricTypes(file = METRICS_PAGE) {
  const types = new Map();
  for (const line of fs.readFileSync(file, "utf8").split("\n")) {
    const m = /^\|\s*([a-z_:][a-z0-9_:]*)\s*\|\s*([a-z]+)/.exec(line);
    if (m && m[1] !== "name") types.set(m[1], m[2]);
  }
  // The "both" section lists the process metrics in prose (up to the next
  // section: the implementation notes name label values like process_exited).
  const text = fs.readFileSync(file, "utf8");
  const start = text.indexOf("\n## both");
  const end = start < 0 ? -1 : text.indexOf("\n## ", start + 1);
  const both = start < 0 ? "" : text.slice(start, end < 0 ? undefined : end);
  for (const m of both.matchAll(/\b(process_[a-z_]+)\b(?: \((counter|gauge)\))?/g)) {
    if (!types.has(m[1])) types.set(m[1], m[1].endsWith("_total") ? "counter" : "gauge");
  }
  return types;
}

// The GPU exporter's metric names the dashboard may use besides ours: the
// table of docs/metrics.md's section "GPU exporter (DCGM)" (the documented
// allow-list; an unlisted DCGM_ name is refused like a typo of ours).
export function dcgmMetrics(file = METRICS_PAGE) {
  const text = fs.readFileSync(file, "utf8");
  const start = text.indexOf("\n## GPU exporter (DCGM)");
  if (start < 0) return [];
  const end = text.indexOf("\n## ", start + 1);
  const section = text.slice(start, end < 0 ? undefined : end);
  return [...section.matchAll(/^\|\s*(DCGM_[A-Z0-9_]+)\s*\|/gm)].map((m) => m[1]);
}

// Series Prometheus makes itself for every target.
export const PROMETHEUS_TARGET_SERIES = ["up"];

export function exportedMetrics(file = path.join(DEPLOY, "exported_metrics.txt")) {
  return fs.readFileSync(file, "utf8").split("\n").map((l) => l.trim()).filter((l) => l !== "");
}

// The series names a name may appear as: histograms and summaries add
// _bucket (histograms), _sum and _count.
function seriesNames(exported, types) {
  const names = new Set();
  for (const n of exported) {
    names.add(n);
    const t = types.get(n) ?? (n === "exposer_request_latencies" ? "summary" : undefined);
    if (t === "histogram") for (const s of ["_bucket", "_sum", "_count"]) names.add(n + s);
    if (t === "summary") for (const s of ["_sum", "_count"]) names.add(n + s);
  }
  return names;
}

// exported_metrics.txt lists every metric of docs/metrics.md, and otherwise only
// prometheus-cpp's own exposer_* metrics.
export function checkExportedList() {
  const errors = [];
  const exported = exportedMetrics();
  const types = metricTypes();
  const seen = new Set();
  for (const n of exported) {
    if (!/^[a-zA-Z_:][a-zA-Z0-9_:]*$/.test(n)) errors.push(`exported_metrics.txt: '${n}' is not a metric name`);
    if (seen.has(n)) errors.push(`exported_metrics.txt: '${n}' is listed twice`);
    seen.add(n);
    if (!types.has(n) && !n.startsWith("exposer_")) errors.push(`exported_metrics.txt: '${n}' is not in docs/metrics.md`);
    if (/_(bucket|sum|count)$/.test(n)) errors.push(`exported_metrics.txt: '${n}': list a histogram by its base name`);
  }
  for (const n of types.keys()) if (!seen.has(n)) errors.push(`exported_metrics.txt: '${n}' of docs/metrics.md is missing`);
  return errors;
}

const PROMQL_KEYWORDS = new Set([
  "and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
  "group_left", "group_right", "inf", "nan", "start", "end",
]);

// The metric names a PromQL expression selects (functions, keywords, label
// names, strings, ranges and Grafana variables excluded).
export function promqlMetricNames(expr) {
  let s = expr.replace(/#.*$/gm, " ");
  s = s.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, " ");
  s = s.replace(/\$\{[^}]*\}|\$\w+/g, " ");
  s = s.replace(/\{[^}]*\}/g, " ");
  s = s.replace(/\[[^\]]*\]/g, " ");
  s = s.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " ");
  s = s.replace(/(?<![\w:])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?(?:ms|s|m|h|d|w|y)?(?![\w:])/g, " ");
  const names = [];
  const re = /[a-zA-Z_:][a-zA-Z0-9_:]*/g;
  let m;
  while ((m = re.exec(s)) !== null) {
    const rest = s.slice(re.lastIndex);
    if (/^\s*\(/.test(rest)) continue;  // A function or aggregation.
    if (PROMQL_KEYWORDS.has(m[0])) continue;
    names.push(m[0]);
  }
  return [...new Set(names)];
}

// Every PromQL expression of the dashboard, with where it is.
export function dashboardQueries(dashboard) {
  const out = [];
  const walk = (panels) => {
    for (const p of panels ?? []) {
      if (p.type === "row") {
        walk(p.panels);
        continue;
      }
      for (const t of p.targets ?? []) out.push({ where: `panel '${p.title}' target ${t.refId}`, expr: t.expr ?? "" });
    }
  };
  walk(dashboard.panels);
  // Prometheus annotation queries (Grafana's own built-in has no expr).
  for (const a of dashboard.annotations?.list ?? []) {
    if (typeof a.expr === "string") out.push({ where: `annotation '${a.name}'`, expr: a.expr });
  }
  for (const v of dashboard.templating?.list ?? []) {
    if (v.type !== "query") continue;
    const q = typeof v.query === "string" ? v.query : v.query?.query ?? "";
    const lv = /^label_values\(\s*(.+?)\s*,\s*[a-zA-Z_]\w*\s*\)$/.exec(q);
    out.push({ where: `variable '${v.name}'`, expr: lv ? lv[1] : q });
  }
  return out;
}

const DASHBOARD_METRICS = [
  ["failures", "shardd_coordinator_failures_detected_total"],
  ["recovery phases", "shardd_coordinator_recovery_duration_seconds_sum"],
  ["epoch", "shardd_coordinator_membership_epoch"],
  ["live members", "shardd_coordinator_members_live"],
  ["expected members", "shardd_coordinator_members_expected"],
  ["committed step", "shardd_coordinator_committed_step"],
  ["step duration", "shardd_step_duration_seconds_bucket"],
  ["collective latency", "shardd_collective_duration_seconds_bucket"],
  ["memory by kind", "shardd_shard_bytes"],
  ["trainer wait", "shardd_trainer_wait_seconds_sum"],
  ["memory against plan", "shardd_planned_bytes"],
  ["rank state", "shardd_ready"],
  ["GPU utilisation (DCGM)", "DCGM_FI_DEV_GPU_UTIL"],
  ["GPU memory (DCGM)", "DCGM_FI_DEV_FB_USED"],
];

// Per-rank views: a panel that must group by the rank target label.
const PER_RANK_PANELS = [
  ["rank state", "shardd_ready"],
  ["step time", "shardd_step_duration_seconds_sum"],
  ["trainer wait", "shardd_trainer_wait_seconds_sum"],
  ["memory against plan", "shardd_planned_bytes"],
];

export function checkDashboard(file = path.join(DEPLOY, "grafana/shardd-dashboard.json")) {
  let dashboard;
  try {
    dashboard = JSON.parse(fs.readFileSync(file, "utf8"));
  } catch (e) {
    return [`${file}: ${e.message}`];
  }
  const errors = [];
  const allowed = seriesNames(exportedMetrics(), metricTypes());
  for (const n of [...dcgmMetrics(), ...PROMETHEUS_TARGET_SERIES]) allowed.add(n);
  const walk = (panels) => {
    for (const p of panels ?? []) {
      if (p.type === "row") {
        walk(p.panels);
        continue;
      }
      if (!(p.targets ?? []).some((t) => (t.expr ?? "").trim() !== "")) errors.push(`${file}: panel '${p.title}' has no query`);
      for (const t of p.targets ?? []) if ((t.expr ?? "").trim() === "") errors.push(`${file}: panel '${p.title}' target ${t.refId} has an empty query`);
    }
  };
  if (!Array.isArray(dashboard.panels) || dashboard.panels.length === 0) errors.push(`${file}: no panels`);
  walk(dashboard.panels);
  const used = new Set();
  for (const q of dashboardQueries(dashboard)) {
    const names = promqlMetricNames(q.expr);
    if (names.length === 0) errors.push(`${file}: ${q.where} selects no metric: ${q.expr}`);
    for (const n of names) {
      used.add(n);
      if (!allowed.has(n)) errors.push(`${file}: ${q.where}: '${n}' is not an exported metric (deploy/exported_metrics.txt), a GPU exporter metric of docs/metrics.md or Prometheus' up`);
    }
  }
  for (const [what, metric] of DASHBOARD_METRICS) {
    if (!used.has(metric)) errors.push(`${file}: no panel shows ${what} (${metric})`);
  }
  const queries = dashboardQueries(dashboard);
  for (const [what, metric] of PER_RANK_PANELS) {
    const perRank = queries.some((q) => q.where.startsWith("panel") && promqlMetricNames(q.expr).includes(metric) && /\bby\s*\([^)]*\brank\b/.test(q.expr));
    if (!perRank) errors.push(`${file}: no panel shows ${what} per rank (${metric} ... by (..., rank))`);
  }
  const epoch = (dashboard.annotations?.list ?? []).some((a) => promqlMetricNames(a.expr ?? "").includes("shardd_coordinator_membership_epoch"));
  if (!epoch) errors.push(`${file}: no annotation marks the membership epoch changes (shardd_coordinator_membership_epoch)`);
  return errors;
}

// Every metric an alert selects is shown by a dashboard query, so that an
// operator paged by an alert finds the numbers it fired on.
export function checkAlertsOnDashboard(file = path.join(DEPLOY, "grafana/shardd-dashboard.json"), groups = alertRuleGroups()) {
  let dashboard;
  try {
    dashboard = JSON.parse(fs.readFileSync(file, "utf8"));
  } catch (e) {
    return [`${file}: ${e.message}`];
  }
  const shown = new Set(dashboardQueries(dashboard).flatMap((q) => promqlMetricNames(q.expr)));
  const errors = [];
  for (const rule of groups.flatMap((g) => g.rules).filter((r) => r.alert)) {
    for (const n of promqlMetricNames(rule.expr)) {
      if (!shown.has(n)) errors.push(`${file}: alert ${rule.alert} fires on '${n}', which no panel shows`);
    }
  }
  return errors;
}

export function alertRuleGroups(file = path.join(DEPLOY, "prometheus/alerts.yml")) {
  return loadYamlFile(file)[0].groups;
}

// The PrometheusRule carries exactly the groups of alerts.yml, and every
// rule selects only exported metrics.
export function checkRules(objects) {
  const errors = [];
  const groups = alertRuleGroups();
  const rules = objects.filter((o) => o.kind === "PrometheusRule");
  if (rules.length !== 1) errors.push(`expected one PrometheusRule, found ${rules.length}`);
  for (const r of rules) {
    if (JSON.stringify(r.spec.groups) !== JSON.stringify(groups)) {
      errors.push(`${objectId(r)}: spec.groups differ from deploy/prometheus/alerts.yml (keep them identical)`);
    }
  }
  const allowed = seriesNames(exportedMetrics(), metricTypes());
  const alerts = new Set();
  for (const g of groups) {
    for (const rule of g.rules) {
      alerts.add(rule.alert);
      for (const n of promqlMetricNames(rule.expr)) {
        if (!allowed.has(n)) errors.push(`alerts.yml: ${rule.alert ?? rule.record}: '${n}' is not an exported metric (deploy/exported_metrics.txt)`);
      }
    }
  }
  errors.push(...checkRunbooks(groups));
  for (const a of ["SharddRecoverySlow", "SharddShardWithoutReplica", "SharddMemberMissing", "SharddPeersPartitioned", "SharddJobFailed", "SharddShmLeftovers", "SharddTrainingStalled", "SharddCheckpointWriteFailing", "SharddCheckpointsSkipped", "SharddOutOfFileDescriptors"]) {
    if (!alerts.has(a)) errors.push(`alerts.yml: alert ${a} is missing`);
  }
  return errors;
}

// GitHub's anchor of a Markdown heading: lower case, punctuation other than
// '-' and '_' dropped, spaces to '-'.
export function headingAnchor(text) {
  return text.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-");
}

export function readmeAnchors(file = path.join(DEPLOY, "README.md")) {
  const anchors = new Set();
  let fence = false;
  for (const line of fs.readFileSync(file, "utf8").split("\n")) {
    if (/^```/.test(line)) fence = !fence;
    const m = !fence && /^#{1,6}\s+(.*)$/.exec(line);
    if (m) anchors.add(headingAnchor(m[1]));
  }
  return anchors;
}

// Every alert has a runbook_url annotation, deploy/README.md#ANCHOR, and
// that README has a heading with this anchor.
export function checkRunbooks(groups = alertRuleGroups(), readme = path.join(DEPLOY, "README.md")) {
  const errors = [];
  const anchors = readmeAnchors(readme);
  for (const rule of groups.flatMap((g) => g.rules).filter((r) => r.alert)) {
    const url = rule.annotations?.runbook_url;
    const m = /^deploy\/README\.md#([\w-]+)$/.exec(url ?? "");
    if (!m) errors.push(`alerts.yml: ${rule.alert}: runbook_url (${url}) must be deploy/README.md#ANCHOR`);
    else if (!anchors.has(m[1])) errors.push(`alerts.yml: ${rule.alert}: runbook_url anchor #${m[1]} is no heading of deploy/README.md`);
  }
  return errors;
}

// A rules file with each dashboard query as a recording rule, Grafana's
// variables replaced, so that promtool can check the PromQL syntax.
export function dashboardAsRules(file) {
  const dashboard = JSON.parse(fs.readFileSync(file, "utf8"));
  const rules = dashboardQueries(dashboard).map((q, i) => ({
    record: `dashboard:query_${i}`,
    expr: q.expr.replaceAll("$__rate_interval", "5m").replaceAll("$__interval", "1m")
      .replaceAll("$__range", "1h").replace(/\$\{?(\w+)\}?/g, ".*"),
  }));
  return YAML.stringify({ groups: [{ name: "dashboard", rules }] });
}

// ---------------------------------------------------------------------------

export const KUSTOMIZATIONS = {
  base: path.join(DEPLOY, "k8s/base"),
  jobset: path.join(DEPLOY, "k8s/jobset"),
  "jobset-cpu": path.join(DEPLOY, "k8s/overlays/jobset-cpu"),
  "jobset-gpu-dra": path.join(DEPLOY, "k8s/overlays/jobset-gpu-dra"),
  "jobset-gpu-device-plugin": path.join(DEPLOY, "k8s/overlays/jobset-gpu-device-plugin"),
  "jobset-tls": path.join(DEPLOY, "k8s/overlays/jobset-tls"),
  "two-jobs/job-a": path.join(DEPLOY, "k8s/examples/two-jobs/job-a"),
  "two-jobs/job-b": path.join(DEPLOY, "k8s/examples/two-jobs/job-b"),
  example: path.join(DEPLOY, "k8s/overlays/example"),
  production: path.join(DEPLOY, "k8s/overlays/production"),
  plaintext: path.join(DEPLOY, "k8s/overlays/plaintext"),
};

// The binaries' own rule (daemon/rpc/plaintext_policy.h): without
// --tls_cert, a gRPC endpoint beyond loopback stops the binary at start
// unless --insecure is given; with TLS, --insecure has no business in the
// manifest.
export function isLoopback(address) {
  if (address.startsWith("unix:") || address.startsWith("/")) return true;
  const host = address.startsWith("[") ? address.slice(1, address.indexOf("]")) : address.slice(0, address.lastIndexOf(":"));
  return host === "localhost" || /^127\./.test(host) || host === "::1";
}

export function checkInsecure(objects) {
  const errors = [];
  for (const { spec, id } of allTemplates(objects)) {
    for (const c of [...(spec.initContainers ?? []), ...(spec.containers ?? [])]) {
      const where = `${id}: container ${c.name}`;
      const args = [...(c.command ?? []), ...(c.args ?? [])];
      const insecure = args.includes("--insecure");
      const tls = flag(c, "tls_cert") !== undefined;
      if (tls && insecure) errors.push(`${where}: --insecure with --tls_cert: TLS is on, drop --insecure`);
      if (tls) continue;
      for (const name of ["listen", "peer_listen", "listen_tcp", "coordinator"]) {
        const value = flag(c, name);
        if (value === undefined || isLoopback(value) || insecure) continue;
        errors.push(`${where}: --${name}=${value} is plaintext beyond loopback without --insecure: the binary refuses to start`);
      }
    }
  }
  return errors;
}

// deploy/grafana renders one ConfigMap for Grafana's sidecar (label
// grafana_dashboard: "1") whose data is the dashboard file, byte for byte.
export async function checkDashboardConfigMap(dir = path.join(DEPLOY, "grafana"), file = path.join(DEPLOY, "grafana/shardd-dashboard.json")) {
  let objects;
  try {
    objects = renderKustomization(dir);
  } catch (e) {
    return [`${dir}: ${e.message}`];
  }
  const errors = await validateSchemas(objects);
  const cms = objects.filter((o) => o.kind === "ConfigMap");
  if (objects.length !== 1 || cms.length !== 1) return [...errors, `${dir}: expected exactly one ConfigMap, got ${objects.map(objectId).join(", ")}`];
  const [cm] = cms;
  if (cm.metadata.labels?.grafana_dashboard !== "1") errors.push(`${objectId(cm)}: needs the label grafana_dashboard: "1" (Grafana's sidecar looks for it)`);
  const keys = Object.keys(cm.data ?? {});
  if (keys.length !== 1 || !keys[0].endsWith(".json")) errors.push(`${objectId(cm)}: needs one key NAME.json, has ${keys.join(", ")}`);
  else if (cm.data[keys[0]] !== fs.readFileSync(file, "utf8")) errors.push(`${objectId(cm)}: data ${keys[0]} is not ${file}`);
  return errors;
}

// Every check on every kustomization; errors as strings.
export async function checkAll() {
  const errors = [];
  errors.push(...checkExportedList(), ...checkDashboard(), ...checkAlertsOnDashboard(), ...await checkDashboardConfigMap(), ...checkExitStatuses());
  for (const [name, dir] of Object.entries(KUSTOMIZATIONS)) {
    let objects;
    try {
      objects = renderKustomization(dir);
    } catch (e) {
      errors.push(`${name}: ${e.message}`);
      continue;
    }
    const tag = (list) => list.map((e) => `${name}: ${e}`);
    errors.push(...tag(await validateSchemas(objects)), ...tag(checkSidecar(objects)),
      ...tag(checkRestricted(objects)), ...tag(checkProbes(objects)), ...tag(checkTls(objects)),
      ...tag(checkJob(objects)), ...tag(checkRules(objects)), ...tag(checkNetworkPolicies(objects)),
      ...tag(checkCertificates(objects)), ...tag(checkInsecure(objects)), ...tag(checkFailedReportWait(objects)));
    if (name !== "base" && name !== "jobset") errors.push(...tag(checkImagesPinned(objects)));
  }
  return errors;
}

async function main(argv) {
  const [cmd, arg] = argv;
  if (cmd === "render" && arg) {
    process.stdout.write(toYaml(renderKustomization(path.resolve(arg))));
  } else if (cmd === "dashboard-rules" && arg) {
    process.stdout.write(dashboardAsRules(path.resolve(arg)));
  } else if (cmd === "check") {
    const errors = await checkAll();
    for (const e of errors) console.error(`error: ${e}`);
    console.log(errors.length === 0 ? "deploy/: every check passed" : `deploy/: ${errors.length} error(s)`);
    process.exitCode = errors.length === 0 ? 0 : 1;
  } else {
    console.error("usage: node validate.mjs check | render DIR | dashboard-rules FILE");
    process.exitCode = 2;
  }
}

if (import.meta.url === pathToFileURL(fs.realpathSync(process.argv[1] ?? "")).href) {
  await main(process.argv.slice(2));
}
