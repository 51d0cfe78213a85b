// deploy/, checked offline (no cluster, no kustomize binary, no root): the Kubernetes manifests are
// rendered as kustomize would (resources, patches, namespace), every object is validated against
// the Kubernetes API's schemas (kubernetes-models), and what sandboxd needs of them is checked
// against its own code: the variables config/ reads and its parser, the system packages the
// runtime wants, the role each container runs. The systemd units and their environment files too.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { after, describe, test } from 'node:test';
import * as models from 'kubernetes-models';
import { parseAllDocuments } from 'yaml';
import { ConfigError, loadConfig, type Config } from '../../packages/server/dist/config/index.js';
import { ClusterSigner, ClusterVerifier } from '../../packages/server/dist/runtime/cluster-auth.js';
import { REQUIRED_TOOLS } from '../../packages/server/dist/runtime/system-packages.js';
import { testClusterKeyFiles } from '../../packages/server/dist/testing/cluster-keys.js';
import { REPO_ROOT } from './harness.js';

const DEPLOY = join(REPO_ROOT, 'deploy');
const K8S = join(DEPLOY, 'kubernetes');
const SYSTEMD = join(DEPLOY, 'systemd');
const CLI = '/opt/sandboxd/packages/server/dist/cli.js';
/** Host facts for loadConfig, so that it reads nothing of this machine. */
const FACTS = { cpus: 4, memoryMb: 16_384, diskGb: 200 };
/** What the downward API would give a node pod. */
const FIELD_SAMPLES: Record<string, string> = { 'spec.nodeName': 'ip-10-0-0-7.eu-west-1.compute.internal', 'status.hostIP': '10.0.0.7', 'status.podIP': '10.244.1.12' };
/** The cluster's key pair an operator would make with `sandboxd cluster keygen`, as files too. */
const KEYS = testClusterKeyFiles();
/** A node's registry credential, as `sandboxd cluster node-credential` writes it. */
const NODE_CREDENTIAL_FILE = join(dirname(KEYS.signingKeyFile), 'node-1.credential');
writeFileSync(NODE_CREDENTIAL_FILE, `${await KEYS.signer.nodeCredentialFor('node-1')}\n`, { mode: 0o600 });
/** Where the Secret volumes of the containers read here are written out (a kubelet's part). */
const MOUNTS = mkdtempSync(join(tmpdir(), 'sbd-deploy-mounts-'));
after(() => {
  KEYS.remove();
  rmSync(MOUNTS, { recursive: true, force: true });
});

// ---- what sandboxd reads ----------------------------------------------------------------------

/**
 * Every SANDBOXD_* variable sandboxd reads: the names written out in config/, and the eight
 * limits it reads as SANDBOXD_<limit name> (the keys of Config.limits).
 */
function configNames(): Set<string> {
  const dir = join(REPO_ROOT, 'packages/server/src/config');
  const source = readdirSync(dir)
    .filter((f) => f.endsWith('.ts') && !f.endsWith('.test.ts'))
    .map((f) => readFileSync(join(dir, f), 'utf8'))
    .join('\n');
  const names = new Set([...source.matchAll(/SANDBOXD_[A-Z0-9_]+/g)].map((m) => m[0]).filter((n) => !n.endsWith('_')));
  for (const limit of Object.keys(loadConfig({}, FACTS).limits)) names.add(`SANDBOXD_${limit.toUpperCase()}`);
  return names;
}
const CONFIG_NAMES = configNames();

// ---- kustomize, the part these manifests use ----------------------------------------------------

interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
  [key: string]: any;
}
interface Placed {
  file: string;
  obj: K8sObject;
}
interface Rendered {
  objects: Placed[];
  /** Every file the rendering read (kustomization files, resources, patches). */
  files: string[];
}

/** The documents of a YAML file; a syntax error, a duplicate key or an empty document fails. */
function yamlDocs(file: string): unknown[] {
  const text = readFileSync(file, 'utf8');
  const out: unknown[] = [];
  for (const doc of parseAllDocuments(text, { uniqueKeys: true, prettyErrors: true })) {
    const problems = [...doc.errors, ...doc.warnings];
    if (problems.length) throw new Error(`${relative(REPO_ROOT, file)}: ${problems.map((e) => e.message).join('; ')}`);
    const value: unknown = doc.toJS();
    if (value === null || value === undefined) throw new Error(`${relative(REPO_ROOT, file)}: an empty YAML document`);
    out.push(value);
  }
  return out;
}

const KUSTOMIZATION_FIELDS = new Set(['apiVersion', 'kind', 'namespace', 'resources', 'patches']);
const CLUSTER_SCOPED = new Set(['Namespace']);

const isMap = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** A strategic merge of a patch that holds no list: maps merge key by key, the rest is replaced. */
function mergeMaps(base: Record<string, unknown>, patch: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const [k, v] of Object.entries(patch)) out[k] = isMap(v) && isMap(out[k]) ? mergeMaps(out[k] as Record<string, unknown>, v) : v;
  return out;
}

function hasList(v: unknown): boolean {
  if (Array.isArray(v)) return true;
  return isMap(v) && Object.values(v).some(hasList);
}

const sameObject = (a: K8sObject, b: K8sObject) => a.apiVersion === b.apiVersion && a.kind === b.kind && a.metadata?.name === b.metadata?.name;

/** What `kubectl kustomize <dir>` gives, for the fields KUSTOMIZATION_FIELDS allows. */
function render(dir: string): Rendered {
  const file = join(dir, 'kustomization.yaml');
  const docs = yamlDocs(file);
  assert.equal(docs.length, 1, `${relative(REPO_ROOT, file)}: one document`);
  const k = docs[0] as Record<string, any>;
  assert.equal(k.apiVersion, 'kustomize.config.k8s.io/v1beta1', `${relative(REPO_ROOT, file)}: apiVersion`);
  assert.equal(k.kind, 'Kustomization', `${relative(REPO_ROOT, file)}: kind`);
  for (const field of Object.keys(k)) assert.ok(KUSTOMIZATION_FIELDS.has(field), `${relative(REPO_ROOT, file)}: field "${field}" is not one this test renders`);
  const out: Rendered = { objects: [], files: [file] };
  for (const r of (k.resources ?? []) as string[]) {
    const path = resolve(dir, r);
    if (statSync(path).isDirectory()) {
      const sub = render(path);
      out.objects.push(...sub.objects);
      out.files.push(...sub.files);
      continue;
    }
    out.files.push(path);
    for (const doc of yamlDocs(path)) {
      assert.ok(isMap(doc), `${relative(REPO_ROOT, path)}: a document is not an object`);
      const obj = doc as unknown as K8sObject;
      assert.ok(obj.apiVersion && obj.kind && obj.metadata?.name, `${relative(REPO_ROOT, path)}: an object without apiVersion, kind or metadata.name`);
      out.objects.push({ file: path, obj });
    }
  }
  for (const p of (k.patches ?? []) as Array<Record<string, unknown>>) {
    assert.deepEqual(Object.keys(p), ['path'], `${relative(REPO_ROOT, file)}: a patch is {path} here`);
    const path = resolve(dir, String(p.path));
    out.files.push(path);
    const [patch, ...more] = yamlDocs(path) as K8sObject[];
    assert.equal(more.length, 0, `${relative(REPO_ROOT, path)}: one patch per file`);
    // With lists, kustomize merges by each list's key; this test only merges maps.
    assert.ok(!hasList(patch), `${relative(REPO_ROOT, path)}: a patch with a list (merged by key in kustomize, not here)`);
    const targets = out.objects.filter((o) => sameObject(o.obj, patch));
    assert.equal(targets.length, 1, `${relative(REPO_ROOT, path)}: patches ${patch.kind} ${patch.metadata?.name}, which the resources hold ${targets.length} times`);
    targets[0]!.obj = mergeMaps(targets[0]!.obj, patch) as K8sObject;
  }
  if (k.namespace) {
    for (const o of out.objects) if (!CLUSTER_SCOPED.has(o.obj.kind)) o.obj = { ...o.obj, metadata: { ...o.obj.metadata, namespace: k.namespace } };
  }
  for (const [i, o] of out.objects.entries()) {
    const twin = out.objects.findIndex((x) => sameObject(x.obj, o.obj) && x.obj.metadata.namespace === o.obj.metadata.namespace);
    assert.equal(twin, i, `${o.obj.kind} ${o.obj.metadata.name} is defined twice (${relative(REPO_ROOT, o.file)})`);
  }
  return out;
}

/** The two ways to deploy: the base alone, and with the PostgreSQL for trying it out. */
const RENDERINGS = { base: K8S, postgres: join(K8S, 'postgres') };
const rendered = new Map<string, Rendered>();
const renderOf = (name: keyof typeof RENDERINGS): Rendered => {
  if (!rendered.has(name)) rendered.set(name, render(RENDERINGS[name]));
  return rendered.get(name)!;
};

// ---- schemas ------------------------------------------------------------------------------------

type ModelClass = new (data: unknown) => { validate(): void };

/** The kubernetes-models class of an apiVersion and kind ("apps/v1" → models.apps.v1). */
function modelClass(apiVersion: string, kind: string): ModelClass | undefined {
  const [group, version] = apiVersion.includes('/') ? apiVersion.split('/') : ['', apiVersion];
  const groupKey = group!.replace(/\.([a-z0-9])/g, (_m, c: string) => c.toUpperCase());
  const all = models as unknown as Record<string, Record<string, Record<string, ModelClass>>>;
  const versions = group === '' ? (models as unknown as Record<string, Record<string, ModelClass>>) : all[groupKey];
  return (versions?.[version!] as Record<string, ModelClass> | undefined)?.[kind];
}

// ---- reading the objects ----------------------------------------------------------------------

const WORKLOADS = new Set(['Deployment', 'DaemonSet', 'StatefulSet']);

const of = (r: Rendered, kind: string) => r.objects.map((o) => o.obj).filter((o) => o.kind === kind);
const named = (r: Rendered, kind: string, name: string) => of(r, kind).find((o) => o.metadata.name === name);
const workloads = (r: Rendered) => r.objects.map((o) => o.obj).filter((o) => WORKLOADS.has(o.kind));
const containersOf = (w: K8sObject): any[] => [...(w.spec.template.spec.initContainers ?? []), ...w.spec.template.spec.containers];
const commandOf = (c: any): string => [...(c.command ?? []), ...(c.args ?? [])].join(' ');

/** The workload whose container runs `cli.js <role>`, and that container. */
function roleContainer(r: Rendered, role: string): { workload: K8sObject; container: any } {
  const found = workloads(r).flatMap((w) => containersOf(w).filter((c) => new RegExp(`${CLI.replace(/\./g, '\\.')} ${role}\\b`).test(commandOf(c))).map((c) => ({ workload: w, container: c })));
  assert.equal(found.length, 1, `one container runs "cli.js ${role}", found ${found.length}`);
  return found[0]!;
}

/** A Secret's keys and values (data is base64, stringData is not). */
function secretValues(s: K8sObject): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries((s.data ?? {}) as Record<string, string>)) out[k] = Buffer.from(v, 'base64').toString('utf8');
  for (const [k, v] of Object.entries((s.stringData ?? {}) as Record<string, string>)) out[k] = String(v);
  return out;
}

/** `$(NAME)` of an earlier variable expanded, `$$` → `$`, as the kubelet does in env values and commands. */
function expand(text: string, vars: Record<string, string>): string {
  return text.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (m, name: string | undefined) => (m === '$$' ? '$' : name !== undefined && name in vars ? vars[name]! : m));
}

/**
 * The environment a container of `r` would start with: its envFrom, then its env in order. Secret
 * values go through `secret` (the placeholders, or what an operator would put there). The Secret
 * volumes it mounts are written out under MOUNTS, and the paths into them in its env point there.
 */
function containerEnv(r: Rendered, c: any, secret: (key: string, value: string) => string): Record<string, string> {
  const env: Record<string, string> = {};
  const mounted = secretMounts(r, c, secret);
  for (const from of c.envFrom ?? []) {
    if (from.configMapRef) Object.assign(env, named(r, 'ConfigMap', from.configMapRef.name)!.data);
    if (from.secretRef) for (const [k, v] of Object.entries(secretValues(named(r, 'Secret', from.secretRef.name)!))) env[k] = secret(k, v);
  }
  for (const e of c.env ?? []) {
    if (e.value !== undefined) env[e.name] = expand(String(e.value), env);
    else if (e.valueFrom?.fieldRef) env[e.name] = FIELD_SAMPLES[e.valueFrom.fieldRef.fieldPath] ?? assert.fail(`no sample for the field ${e.valueFrom.fieldRef.fieldPath}`);
    else if (e.valueFrom?.secretKeyRef) {
      const ref = e.valueFrom.secretKeyRef;
      env[e.name] = secret(ref.key, secretValues(named(r, 'Secret', ref.name)!)[ref.key]!);
    } else if (e.valueFrom?.configMapKeyRef) {
      const ref = e.valueFrom.configMapKeyRef;
      env[e.name] = named(r, 'ConfigMap', ref.name)!.data[ref.key];
    } else assert.fail(`env ${e.name}: a source this test does not know`);
  }
  for (const [name, value] of Object.entries(env)) {
    for (const [at, dir] of mounted) if (value.startsWith(`${at}/`)) env[name] = join(dir, value.slice(at.length + 1));
  }
  return env;
}

let mounts = 0;
/** The Secret volumes container `c` mounts, written out as the kubelet would: mount path → directory. */
function secretMounts(r: Rendered, c: any, secret: (key: string, value: string) => string): Map<string, string> {
  const w = workloads(r).find((x) => containersOf(x).includes(c));
  const out = new Map<string, string>();
  for (const m of c.volumeMounts ?? []) {
    const v = w && volumeOf(w, m.name);
    if (!v?.secret) continue;
    const values = secretValues(named(r, 'Secret', v.secret.secretName)!);
    const dir = join(MOUNTS, String(mounts++));
    const items: Array<{ key: string; path: string }> = v.secret.items ?? Object.keys(values).map((key) => ({ key, path: key }));
    for (const { key, path } of items) {
      mkdirSync(dirname(join(dir, path)), { recursive: true });
      writeFileSync(join(dir, path), secret(key, values[key]!), { mode: 0o400 });
    }
    out.set(String(m.mountPath).replace(/\/+$/, ''), dir);
  }
  return out;
}

/** What an operator puts in place of the placeholders. */
function filledIn(key: string, value: string): string {
  // The environment files name where keygen wrote the pair; here, where this test did.
  if (key === 'SANDBOXD_CLUSTER_SIGNING_KEY_FILE') return KEYS.signingKeyFile;
  if (key === 'SANDBOXD_CLUSTER_VERIFY_KEY_FILE') return KEYS.verifyKeyFile;
  if (key === 'SANDBOXD_NODE_CREDENTIAL_FILE') return NODE_CREDENTIAL_FILE;
  if (!value.includes('REPLACE_ME')) return value;
  if (key === 'SANDBOXD_DATABASE_URL' && value.trim() === 'REPLACE_ME') return 'postgresql://sandboxd:0123abcd@db.internal:5432/sandboxd';
  if (key === 'SANDBOXD_BOOTSTRAP_API_KEY') return 'f'.repeat(64);
  // The key pair of `sandboxd cluster keygen`, as the Kubernetes Secrets hold it.
  if (key === 'cluster-signing.pem') return KEYS.signingPem;
  if (key === 'cluster-verify.pem') return KEYS.verifyPem;
  return value.replaceAll('REPLACE_ME', '0123abcd');
}

const asShipped = (_key: string, value: string) => value;

/** loadConfig's verdict: the config, or the ConfigError's message. */
function configOf(env: Record<string, string>): Config | string {
  try {
    return loadConfig(env, FACTS);
  } catch (err) {
    if (err instanceof ConfigError) return err.message;
    throw err;
  }
}

/** loadConfig's config for `env`, which it must accept. */
function mustConfig(env: Record<string, string>, what: string): Config {
  const config = configOf(env);
  if (typeof config === 'string') assert.fail(`${what}: sandboxd refuses its configuration: ${config}`);
  return config;
}

function mountAt(c: any, path: string): any {
  const m = (c.volumeMounts ?? []).find((v: any) => v.mountPath === path);
  assert.ok(m, `container ${c.name} mounts nothing at ${path}`);
  return m;
}
/** The mount that holds `path` (the deepest whose mount path is it or one of its parents). */
function mountHolding(c: any, path: string): any {
  const ms = (c.volumeMounts ?? []).filter((v: any) => path === v.mountPath || path.startsWith(`${String(v.mountPath).replace(/\/+$/, '')}/`));
  assert.ok(ms.length, `container ${c.name} mounts nothing that holds ${path}`);
  return ms.sort((a: any, b: any) => b.mountPath.length - a.mountPath.length)[0];
}
const volumeOf = (w: K8sObject, name: string) => (w.spec.template.spec.volumes ?? []).find((v: any) => v.name === name);

// ---- the tests --------------------------------------------------------------------------------

describe('deploy/kubernetes: the manifests', () => {
  test('every YAML file under deploy/kubernetes is read by a kustomization (none is forgotten)', () => {
    const onDisk: string[] = [];
    const walk = (dir: string) => {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        if (e.isDirectory()) walk(join(dir, e.name));
        else if (/\.ya?ml$/.test(e.name)) onDisk.push(join(dir, e.name));
      }
    };
    walk(K8S);
    const read = new Set([...renderOf('base').files, ...renderOf('postgres').files]);
    assert.deepEqual(onDisk.filter((f) => !read.has(f)).map((f) => relative(REPO_ROOT, f)), []);
    assert.ok(onDisk.length >= 10, `found only ${onDisk.length} YAML files`);
  });

  for (const name of Object.keys(RENDERINGS) as Array<keyof typeof RENDERINGS>) {
    describe(`rendering "${name}"`, () => {
      test('every object is valid against the Kubernetes API schemas', () => {
        const r = renderOf(name);
        assert.ok(r.objects.length > 0);
        for (const { file, obj } of r.objects) {
          const Model = modelClass(obj.apiVersion, obj.kind);
          assert.ok(Model, `${relative(REPO_ROOT, file)}: ${obj.apiVersion} ${obj.kind} is not a Kubernetes API kind`);
          try {
            new Model(obj).validate();
          } catch (err) {
            assert.fail(`${relative(REPO_ROOT, file)}: ${obj.kind} ${obj.metadata.name}: ${(err as Error).message}`);
          }
          const label = obj.kind === 'Namespace' || obj.kind === 'Service';
          assert.match(obj.metadata.name, label ? /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/ : /^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/, `${obj.kind} ${obj.metadata.name}: not a valid name`);
        }
      });

      test('everything in one namespace, which the rendering creates', () => {
        const r = renderOf(name);
        const ns = of(r, 'Namespace');
        assert.equal(ns.length, 1);
        for (const { obj } of r.objects) if (obj.kind !== 'Namespace') assert.equal(obj.metadata.namespace, ns[0]!.metadata.name, `${obj.kind} ${obj.metadata.name}`);
      });

      test('references resolve: selectors, service accounts, volumes, claims, ConfigMaps, Secrets and their keys, ports', () => {
        const r = renderOf(name);
        for (const w of workloads(r)) {
          const where = `${w.kind} ${w.metadata.name}`;
          const pod = w.spec.template.spec;
          for (const [k, v] of Object.entries(w.spec.selector.matchLabels as Record<string, string>)) {
            assert.equal(w.spec.template.metadata.labels?.[k], v, `${where}: its selector does not match its pods (${k})`);
          }
          if (pod.serviceAccountName) assert.ok(named(r, 'ServiceAccount', pod.serviceAccountName), `${where}: no ServiceAccount ${pod.serviceAccountName}`);
          const volumes = new Set<string>([...(pod.volumes ?? []).map((v: any) => v.name), ...(w.spec.volumeClaimTemplates ?? []).map((t: any) => t.metadata.name)]);
          for (const v of pod.volumes ?? []) {
            if (v.persistentVolumeClaim) assert.ok(named(r, 'PersistentVolumeClaim', v.persistentVolumeClaim.claimName), `${where}: no PersistentVolumeClaim ${v.persistentVolumeClaim.claimName}`);
            if (v.secret) {
              const secret = named(r, 'Secret', v.secret.secretName);
              assert.ok(secret, `${where}: no Secret ${v.secret.secretName}`);
              for (const item of v.secret.items ?? []) assert.ok(item.key in secretValues(secret), `${where}: the Secret ${v.secret.secretName} has no key ${item.key}`);
            }
          }
          const names = containersOf(w).map((c) => c.name);
          assert.equal(new Set(names).size, names.length, `${where}: two containers with one name`);
          for (const c of containersOf(w)) {
            const at = `${where}, container ${c.name}`;
            for (const m of c.volumeMounts ?? []) {
              assert.ok(volumes.has(m.name), `${at}: mounts ${m.name}, which is no volume`);
              if (m.mountPropagation === 'Bidirectional') assert.equal(c.securityContext?.privileged, true, `${at}: Bidirectional propagation is for privileged containers only`);
            }
            for (const e of c.env ?? []) {
              const ref = e.valueFrom?.secretKeyRef ?? e.valueFrom?.configMapKeyRef;
              if (!ref) continue;
              const kind = e.valueFrom.secretKeyRef ? 'Secret' : 'ConfigMap';
              const o = named(r, kind, ref.name);
              assert.ok(o, `${at}: env ${e.name} reads the ${kind} ${ref.name}, which does not exist`);
              const keys = kind === 'Secret' ? Object.keys(secretValues(o)) : Object.keys(o.data ?? {});
              assert.ok(keys.includes(ref.key), `${at}: env ${e.name} reads the key ${ref.key} that the ${kind} ${ref.name} does not have`);
            }
            for (const from of c.envFrom ?? []) {
              const [kind, ref] = from.configMapRef ? ['ConfigMap', from.configMapRef] : ['Secret', from.secretRef];
              assert.ok(named(r, kind, ref.name), `${at}: envFrom the ${kind} ${ref.name}, which does not exist`);
            }
            const portNames = new Set((c.ports ?? []).map((p: any) => p.name));
            const portNumbers = new Set((c.ports ?? []).map((p: any) => p.containerPort));
            for (const p of c.ports ?? []) if (p.name) assert.match(p.name, /^(?=.*[a-z])[a-z0-9]([-a-z0-9]{0,13}[a-z0-9])?$/, `${at}: port name ${p.name}`);
            for (const probe of [c.startupProbe, c.readinessProbe, c.livenessProbe].filter(Boolean)) {
              const port = probe.httpGet?.port ?? probe.tcpSocket?.port;
              if (port === undefined) continue;
              assert.ok(typeof port === 'string' ? portNames.has(port) : portNumbers.has(port), `${at}: a probe on port ${port}, which the container does not declare`);
            }
          }
        }
        for (const s of of(r, 'Service')) {
          const pods = workloads(r).filter((w) => Object.entries(s.spec.selector as Record<string, string>).every(([k, v]) => w.spec.template.metadata.labels?.[k] === v));
          assert.equal(pods.length, 1, `Service ${s.metadata.name} selects ${pods.length} workloads`);
          const ports = containersOf(pods[0]!).flatMap((c) => c.ports ?? []);
          for (const p of s.spec.ports) {
            const target = p.targetPort ?? p.port;
            assert.ok(ports.some((cp: any) => (typeof target === 'string' ? cp.name === target : cp.containerPort === target)), `Service ${s.metadata.name}: targetPort ${target} is no port of ${pods[0]!.metadata.name}`);
          }
        }
        for (const s of of(r, 'StatefulSet')) assert.ok(named(r, 'Service', s.spec.serviceName), `StatefulSet ${s.metadata.name}: no Service ${s.spec.serviceName}`);
      });

      test('every SANDBOXD_* name in the manifests is a variable sandboxd reads (config.ts)', () => {
        const r = renderOf(name);
        const used = new Set<string>();
        for (const f of r.files) for (const m of readFileSync(f, 'utf8').matchAll(/SANDBOXD_[A-Z0-9_]+/g)) used.add(m[0]);
        for (const w of workloads(r)) for (const c of containersOf(w)) for (const e of c.env ?? []) if (/^SANDBOXD/.test(e.name)) used.add(e.name);
        for (const cm of of(r, 'ConfigMap')) for (const k of Object.keys(cm.data ?? {})) used.add(k);
        assert.ok(used.size >= 10, `found only ${used.size} names`);
        assert.deepEqual([...used].filter((n) => !CONFIG_NAMES.has(n)), [], 'names sandboxd does not read (config.ts)');
        for (const cm of of(r, 'ConfigMap')) for (const k of Object.keys(cm.data ?? {})) assert.match(k, /^SANDBOXD_/, `ConfigMap ${cm.metadata.name}: ${k}`);
      });

      test('no secret is committed: every Secret value is a REPLACE_ME placeholder or empty', () => {
        const r = renderOf(name);
        for (const s of of(r, 'Secret')) {
          for (const [k, v] of Object.entries(secretValues(s))) assert.ok(v === '' || v.includes('REPLACE_ME'), `Secret ${s.metadata.name}: ${k} holds a value, not a placeholder`);
        }
      });

      test('sandboxd refuses to start on the placeholders, and starts on filled-in values', () => {
        const r = renderOf(name);
        for (const role of ['node', 'control']) {
          const { container } = roleContainer(r, role);
          const shipped = configOf(containerEnv(r, container, asShipped));
          assert.equal(typeof shipped, 'string', `${role}: the placeholders were accepted`);
          mustConfig(containerEnv(r, container, filledIn), role);
        }
      });

      test("the cluster's keys: control alone has the private key (a 0400 file); the nodes only the public one", async () => {
        const r = renderOf(name);
        const control = roleContainer(r, 'control');
        const node = roleContainer(r, 'node');
        // Control: SANDBOXD_CLUSTER_SIGNING_KEY_FILE is in a read-only Secret volume, root's alone.
        const file = (control.container.env ?? []).find((e: any) => e.name === 'SANDBOXD_CLUSTER_SIGNING_KEY_FILE')?.value as string | undefined;
        assert.ok(file, 'control reads SANDBOXD_CLUSTER_SIGNING_KEY_FILE');
        const mount = (control.container.volumeMounts ?? []).find((m: any) => file.startsWith(`${m.mountPath}/`));
        assert.ok(mount, `${file} is in a volume control mounts`);
        assert.equal(mount.readOnly, true, 'the signing key volume is read-only');
        const volume = volumeOf(control.workload, mount.name);
        const signingSecret = volume?.secret?.secretName as string;
        assert.ok(signingSecret, 'the signing key comes from a Secret');
        assert.equal(volume.secret.defaultMode, 0o400, 'the signing key file is 0400');
        assert.deepEqual(Object.keys(secretValues(named(r, 'Secret', signingSecret)!)), [file.slice(mount.mountPath.length + 1)], 'the signing Secret holds that key alone');
        // The nodes: nothing of that Secret, no signing key file; the public key from a Secret of its own.
        const refs = JSON.stringify(node.workload.spec.template.spec);
        assert.ok(!refs.includes(`"${signingSecret}"`), `the node pods never reference the Secret ${signingSecret}`);
        assert.ok(!refs.includes('SANDBOXD_CLUSTER_SIGNING_KEY_FILE'));
        const verify = (node.container.env ?? []).find((e: any) => e.name === 'SANDBOXD_CLUSTER_VERIFY_KEY');
        assert.ok(verify?.valueFrom?.secretKeyRef, 'the node reads SANDBOXD_CLUSTER_VERIFY_KEY from a Secret');
        assert.notEqual(verify.valueFrom.secretKeyRef.name, signingSecret);
        for (const secret of of(r, 'Secret').filter((x) => refs.includes(`"${x.metadata.name}"`))) {
          for (const [k, v] of Object.entries(secretValues(secret))) assert.doesNotMatch(filledIn(k, v), /PRIVATE KEY/, `a node reads the Secret ${secret.metadata.name}, whose ${k} is a private key`);
        }
        // Filled in: control's key signs what the node's key verifies; a node given the private key refuses.
        const controlConfig = mustConfig(containerEnv(r, control.container, filledIn), 'control');
        const nodeEnv = containerEnv(r, node.container, filledIn);
        const nodeConfig = mustConfig(nodeEnv, 'node');
        assert.equal(controlConfig.node.signingKey?.type, 'private');
        assert.equal(nodeConfig.node.signingKey, null);
        assert.equal(nodeConfig.node.verifyKey?.type, 'public');
        await new ClusterVerifier(nodeConfig.node.verifyKey!).verify(await new ClusterSigner(controlConfig.node.signingKey!).tokenFor(nodeConfig.node.id), nodeConfig.node.id);
        assert.match(String(configOf({ ...nodeEnv, SANDBOXD_CLUSTER_VERIFY_KEY: KEYS.signingPem })), /a node needs the public key only/);
      });

      test('the node DaemonSet: privileged, host network and PIDs, the host paths the runtime needs', () => {
        const r = renderOf(name);
        const { workload: ds, container: c } = roleContainer(r, 'node');
        assert.equal(ds.kind, 'DaemonSet');
        const pod = ds.spec.template.spec;
        assert.equal(c.securityContext?.privileged, true, 'privileged');
        assert.equal(pod.hostNetwork, true, 'hostNetwork (bridge, veths, nftables of the host)');
        assert.equal(pod.hostPID, true, "hostPID (sandboxes' PID namespaces must not die with the pod's)");
        assert.equal(pod.dnsPolicy, 'ClusterFirstWithHostNet', 'cluster names from the host network');
        const config = mustConfig(containerEnv(r, c, filledIn), 'node');
        const hostPath = (mountPath: string, opts: { propagation?: string; readOnly?: boolean } = {}) => {
          const m = mountAt(c, mountPath);
          const v = volumeOf(ds, m.name);
          assert.equal(v?.hostPath?.path, mountPath, `${mountPath}: the host's own ${mountPath}`);
          if (opts.propagation) assert.equal(m.mountPropagation, opts.propagation, `${mountPath}: mount propagation`);
          if (opts.readOnly) assert.equal(m.readOnly, true, `${mountPath}: read-only`);
        };
        hostPath(config.dataDir, { propagation: 'Bidirectional' });
        hostPath('/sys/fs/cgroup');
        hostPath('/run/netns', { propagation: 'Bidirectional' });
        hostPath('/run/sandboxd');
        hostPath('/dev');
        hostPath('/lib/modules', { readOnly: true });
        // The node API answers only signed calls: a TCP probe on the port it listens on.
        assert.deepEqual(c.readinessProbe?.tcpSocket, { port: config.node.listen.port });
        for (const p of [c.startupProbe, c.readinessProbe, c.livenessProbe]) assert.equal(p?.httpGet, undefined, 'an HTTP probe of the node API gets 401');
        assert.ok((c.ports ?? []).some((p: any) => p.containerPort === config.node.listen.port), 'the node API port is declared');
        assert.equal(config.node.listen.host, FIELD_SAMPLES['status.hostIP'], "the node API listens on the machine's address");
      });

      test("the node's id: the Kubernetes node's name made into one sandboxd accepts", () => {
        const r = renderOf(name);
        const { container: c } = roleContainer(r, 'node');
        assert.equal(c.command?.[0], '/bin/sh');
        const script = expand(String(c.command[2]), {});
        const exec = `exec node ${CLI} node`;
        assert.ok(script.trimEnd().endsWith(exec), `the script ends with "${exec}"`);
        const env = containerEnv(r, c, filledIn);
        const id = execFileSync('/bin/sh', ['-c', `${script.trimEnd().slice(0, -exec.length)} printf '%s' "$SANDBOXD_NODE_ID"`], { env: { PATH: process.env.PATH, ...env }, encoding: 'utf8' });
        assert.equal(id, 'ip-10-0-0-7-eu-west-1-compute-internal');
        assert.equal(mustConfig({ ...env, SANDBOXD_NODE_ID: id }, 'node').node.id, id);
      });

      test('control: replicas, rolled one at a time; its API where the config says; nothing of its own to keep', () => {
        const r = renderOf(name);
        const { workload: d, container: c } = roleContainer(r, 'control');
        assert.equal(d.kind, 'Deployment');
        assert.ok(d.spec.replicas >= 2, 'control is replicated (docs/cluster.md)');
        assert.notEqual(d.spec.strategy?.type, 'Recreate', 'a rollout keeps replicas serving');
        const config = mustConfig(containerEnv(r, c, filledIn), 'control');
        const port = (n: number) => (c.ports ?? []).find((p: any) => p.containerPort === n);
        assert.ok(port(config.port), `the API port ${config.port} is declared`);
        assert.equal(config.host, '0.0.0.0', 'the API listens beyond the pod');
        assert.equal(config.gateway.mode, 'host', "public_host names the edge's wildcard domain");
        const servicePorts = of(r, 'Service').flatMap((s) => s.spec.ports.map((p: any) => ({ s, p })));
        const api = servicePorts.find(({ s, p }) => s.spec.selector?.['app.kubernetes.io/component'] === 'control' && (p.targetPort === port(config.port).name || p.targetPort === config.port));
        assert.ok(api, 'a Service for the API');
        for (const p of [c.startupProbe, c.readinessProbe, c.livenessProbe]) assert.equal(p?.httpGet?.path, '/health');
        // Replicas share the store (the tokens' signing key is there): the data directory is scratch.
        const data = volumeOf(d, mountAt(c, config.dataDir).name);
        assert.ok(data?.emptyDir, "control's data directory is scratch (emptyDir): nothing in it is shared");
        // Nodes fetch layers from the replica that named them: its own address, not a Service's.
        assert.equal(config.layerTransfer.controlUrl, `http://${FIELD_SAMPLES['status.podIP']}:${config.port}`, 'SANDBOXD_CONTROL_URL is this replica');
      });

      test("edge: replicas, the gateway's Service on the port and domain control writes into public_host", () => {
        const r = renderOf(name);
        const { workload: d, container: c } = roleContainer(r, 'edge');
        assert.equal(d.kind, 'Deployment');
        assert.ok(d.spec.replicas >= 2);
        assert.notEqual(c.securityContext?.privileged, true, 'the edge runs no sandbox: not privileged');
        const config = mustConfig(containerEnv(r, c, filledIn), 'edge');
        const control = mustConfig(containerEnv(r, roleContainer(r, 'control').container, filledIn), 'control');
        assert.equal(config.gateway.mode, 'host');
        assert.equal(config.gateway.domain, control.gateway.domain, 'the same domain as control');
        assert.equal(config.gateway.hostModePort, control.gateway.hostModePort, 'the same port as control');
        assert.equal(config.gateway.bindHost, '0.0.0.0');
        const port = (n: number) => (c.ports ?? []).find((p: any) => p.containerPort === n);
        assert.ok(port(config.gateway.hostModePort), 'the gateway port is declared');
        const gw = of(r, 'Service')
          .flatMap((s) => s.spec.ports.map((p: any) => ({ s, p })))
          .find(({ s, p }) => s.spec.selector?.['app.kubernetes.io/component'] === 'edge' && (p.targetPort === port(config.gateway.hostModePort).name || p.targetPort === config.gateway.hostModePort));
        assert.ok(gw, "a Service for the edge's gateway");
        assert.equal(gw.p.port, config.gateway.hostModePort, 'the gateway Service port is SANDBOXD_GATEWAY_PORT');
        assert.ok(port(config.port), 'the probes port is declared');
        assert.equal(c.readinessProbe?.httpGet?.path, '/ready');
        assert.equal(c.livenessProbe?.httpGet?.path, '/health');
      });

      test("the layers: control's on one ReadWriteMany volume; a node's in its own host path, none of the volume", () => {
        const r = renderOf(name);
        const { workload: cw, container: cc } = roleContainer(r, 'control');
        const cconfig = mustConfig(containerEnv(r, cc, filledIn), 'control');
        const v = volumeOf(cw, mountAt(cc, cconfig.layersDir).name);
        assert.ok(v?.persistentVolumeClaim, 'control: the layers are on a PersistentVolumeClaim');
        const pvc = named(r, 'PersistentVolumeClaim', v.persistentVolumeClaim.claimName as string)!;
        assert.ok(pvc.spec.accessModes.includes('ReadWriteMany'), 'ReadWriteMany');
        const { workload: nw, container: nc } = roleContainer(r, 'node');
        const nconfig = mustConfig(containerEnv(r, nc, filledIn), 'node');
        const nv = volumeOf(nw, mountHolding(nc, nconfig.layersDir).name);
        assert.ok(nv?.hostPath, "node: its layers are in a host path of its machine (they outlive the pod)");
        assert.ok(!(nw.spec.template.spec.volumes ?? []).some((x: any) => x.persistentVolumeClaim), 'the node mounts no shared volume');
      });

      test('one image for the roles', () => {
        const r = renderOf(name);
        const images = new Set((['node', 'control', 'edge'] as const).map((role) => roleContainer(r, role).container.image));
        assert.equal(images.size, 1);
      });
    });
  }

  test('postgres: the database URL names the PostgreSQL it deploys, with its password', () => {
    const r = renderOf('postgres');
    const db = of(r, 'StatefulSet').find((s) => s.spec.template.spec.containers.some((c: any) => /^postgres:/.test(c.image)));
    assert.ok(db, 'a PostgreSQL StatefulSet');
    assert.equal(db.spec.replicas, 1);
    const c = db.spec.template.spec.containers[0];
    const env = containerEnv(r, c, asShipped);
    const secret = secretValues(named(r, 'Secret', 'sandboxd-secrets')!);
    const url = new URL(secret.SANDBOXD_DATABASE_URL!);
    assert.equal(decodeURIComponent(url.password), env.POSTGRES_PASSWORD, 'the same password in the URL and the database');
    assert.equal(url.username, env.POSTGRES_USER);
    assert.equal(url.pathname, `/${env.POSTGRES_DB}`);
    const service = named(r, 'Service', url.hostname);
    assert.ok(service, `the URL's host ${url.hostname} is the PostgreSQL Service`);
    assert.equal(String(service.spec.ports[0].port), url.port || '5432');
    // The base leaves the URL to the operator.
    assert.equal(secretValues(named(renderOf('base'), 'Secret', 'sandboxd-secrets')!).SANDBOXD_DATABASE_URL, 'REPLACE_ME');
  });
});

describe('deploy/Containerfile', () => {
  const text = readFileSync(join(DEPLOY, 'Containerfile'), 'utf8').replace(/\\\n/g, ' ');
  test('Node 20, every system package the runtime needs, the repository built at the path the manifests run', () => {
    assert.match(text, /^FROM node:20-bookworm\S*$/m);
    const install = text.split('\n').find((l) => /apt-get install/.test(l));
    assert.ok(install, 'an apt-get install');
    const pkgs = new Set(install.split(/\s+/));
    assert.deepEqual([...new Set(REQUIRED_TOOLS.map((t) => t.pkg))].filter((p) => !pkgs.has(p)), [], 'packages of REQUIRED_TOOLS missing from the image');
    assert.match(text, /^WORKDIR \/opt\/sandboxd$/m);
    assert.match(text, /npm ci/);
    assert.match(text, /npm run build/);
    assert.ok(CLI.startsWith('/opt/sandboxd/'));
  });
});

// ---- systemd ----------------------------------------------------------------------------------

type Unit = Map<string, Map<string, string[]>>;

/** A unit file: [Section] headers, Key=Value lines (a key may repeat), # and ; comments, \ continuations. */
function parseUnit(text: string, file: string): Unit {
  const unit: Unit = new Map();
  let section: Map<string, string[]> | undefined;
  const lines = text.replace(/\\\n/g, ' ').split('\n');
  for (const [i, raw] of lines.entries()) {
    const line = raw.trim();
    if (!line || line.startsWith('#') || line.startsWith(';')) continue;
    const header = /^\[([A-Za-z]+)\]$/.exec(line);
    if (header) {
      assert.ok(!unit.has(header[1]!), `${file}: [${header[1]}] twice`);
      section = new Map();
      unit.set(header[1]!, section);
      continue;
    }
    const kv = /^([A-Za-z][A-Za-z0-9]*)\s*=\s*(.*)$/.exec(line);
    assert.ok(kv, `${file}:${i + 1}: not Key=Value: ${line}`);
    assert.ok(section, `${file}:${i + 1}: a key before any [Section]`);
    section.set(kv[1]!, [...(section.get(kv[1]!) ?? []), kv[2]!]);
  }
  return unit;
}

/** The keys these units may use, per section: a misspelt one is ignored by systemd with a warning only. */
const UNIT_KEYS: Record<string, string[]> = {
  Unit: ['Description', 'Documentation', 'After', 'Wants', 'Requires'],
  Service: ['Type', 'User', 'EnvironmentFile', 'WorkingDirectory', 'ExecStart', 'Restart', 'RestartSec', 'KillMode', 'TimeoutStopSec', 'LimitNOFILE', 'NoNewPrivileges', 'ProtectSystem', 'ProtectHome', 'PrivateTmp'],
  Install: ['WantedBy'],
};

/** An environment file: NAME=value lines; `#NAME=value` lines are settings shown commented out. */
function parseEnvFile(text: string): { set: Record<string, string>; mentioned: string[] } {
  const set: Record<string, string> = {};
  const mentioned: string[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    const commented = /^#\s*([A-Z][A-Z0-9_]*)=/.exec(line);
    if (commented) mentioned.push(commented[1]!);
    if (!line || line.startsWith('#')) continue;
    const kv = /^([A-Za-z_][A-Za-z0-9_]*)=(.*)$/.exec(line);
    assert.ok(kv, `not NAME=value: ${line}`);
    set[kv[1]!] = kv[2]!;
    mentioned.push(kv[1]!);
  }
  return { set, mentioned };
}

describe('deploy/systemd: the units and their environment files', () => {
  for (const role of ['node', 'control', 'edge'] as const) {
    const unitFile = join(SYSTEMD, `sandboxd-${role}.service`);
    const envExample = join(SYSTEMD, `${role}.env.example`);

    test(`sandboxd-${role}.service runs "cli.js ${role}" with its environment file, restarts on failure`, () => {
      const text = readFileSync(unitFile, 'utf8');
      const unit = parseUnit(text, relative(REPO_ROOT, unitFile));
      assert.deepEqual([...unit.keys()], ['Unit', 'Service', 'Install']);
      for (const [section, keys] of unit) {
        for (const k of keys.keys()) assert.ok(UNIT_KEYS[section]!.includes(k), `[${section}] ${k} is not a key this unit should have`);
      }
      const service = unit.get('Service')!;
      const one = (k: string) => {
        const v = service.get(k);
        assert.equal(v?.length, 1, `[Service] ${k} once`);
        return v[0]!;
      };
      const exec = one('ExecStart').split(/\s+/);
      assert.match(exec[0]!, /^\/\S+\/node$/, 'an absolute path to node');
      assert.deepEqual(exec.slice(1), [CLI, role]);
      assert.ok(one('ExecStart').startsWith('/'));
      assert.equal(one('EnvironmentFile'), `/etc/sandboxd/${role}.env`);
      assert.equal(one('Restart'), 'on-failure');
      assert.equal(one('WorkingDirectory'), '/opt/sandboxd');
      // The node's sandboxes are outside its cgroup; KillMode=process also leaves its host tools be.
      if (role === 'node') assert.equal(one('KillMode'), 'process');
      else assert.equal(service.get('KillMode'), undefined, `${role}: stopping it stops all it started`);
      // The roles that run sandboxes are root; the edge runs none and is not.
      if (role === 'edge') assert.ok(service.get('User')?.[0] && service.get('User')![0] !== 'root', 'the edge runs as a user of its own');
      else assert.equal(service.get('User'), undefined, `${role} runs as root`);
      assert.deepEqual(unit.get('Install')!.get('WantedBy'), ['multi-user.target']);
      assert.match(text, /0600/, 'says the environment file is 0600');
      for (const m of text.matchAll(/SANDBOXD_[A-Z0-9_]+/g)) assert.ok(CONFIG_NAMES.has(m[0]), `${m[0]} is not a variable sandboxd reads`);
    });

    test(`${role}.env.example: only variables sandboxd reads; refused as shipped, accepted filled in`, () => {
      const text = readFileSync(envExample, 'utf8');
      assert.match(text, /0600/, 'says the file is 0600');
      const { set, mentioned } = parseEnvFile(text);
      assert.ok(Object.keys(set).length >= 5);
      for (const n of [...mentioned, ...[...text.matchAll(/SANDBOXD_[A-Z0-9_]+/g)].map((m) => m[0])]) {
        assert.match(n, /^SANDBOXD_/, `${n}: not a sandboxd variable`);
        assert.ok(CONFIG_NAMES.has(n), `${n} is not a variable sandboxd reads (config.ts)`);
      }
      assert.equal(typeof configOf(set), 'string', 'the placeholders were accepted');
      mustConfig(Object.fromEntries(Object.entries(set).map(([k, v]) => [k, filledIn(k, v)])), `${role}.env.example`);
    });
  }

  test('the node joins through control with a credential of its own and no database credentials; control listens where nodes reach it', () => {
    const [node, control] = (['node', 'control'] as const).map((role) => parseEnvFile(readFileSync(join(SYSTEMD, `${role}.env.example`), 'utf8')).set);
    assert.equal(node!.SANDBOXD_DATABASE_URL, undefined, 'no database URL on a node');
    const nodeConfig = mustConfig(Object.fromEntries(Object.entries(node!).map(([k, v]) => [k, filledIn(k, v)])), 'node.env.example');
    assert.equal(nodeConfig.databaseUrl, undefined);
    assert.ok(nodeConfig.node.credential && nodeConfig.node.controlUrls.length > 0, 'a credential and where control is');
    assert.ok(control!.SANDBOXD_HOST === '0.0.0.0', 'control listens beyond loopback');
    const config = mustConfig(Object.fromEntries(Object.entries(control!).map(([k, v]) => [k, filledIn(k, v)])), 'control.env.example');
    // Several replicas and the edges serve every sandbox only in host mode, all on one domain and port.
    const edge = parseEnvFile(readFileSync(join(SYSTEMD, 'edge.env.example'), 'utf8')).set;
    const edgeConfig = mustConfig(Object.fromEntries(Object.entries(edge).map(([k, v]) => [k, filledIn(k, v)])), 'edge.env.example');
    assert.equal(config.gateway.mode, 'host', "control's gateway in host mode");
    assert.deepEqual([config.gateway.domain, config.gateway.hostModePort], [edgeConfig.gateway.domain, edgeConfig.gateway.hostModePort], "the edge's domain and port");
    assert.equal(config.gateway.bindHost, '0.0.0.0', 'the gateway listens beyond loopback');
    assert.notEqual(new URL(config.layerTransfer.controlUrl).hostname, '0.0.0.0', 'the nodes reach this replica at an address of its own');
  });
});
