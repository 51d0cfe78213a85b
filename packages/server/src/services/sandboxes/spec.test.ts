// The specs a node is given (spec.ts): a row's, with its identity, and a create's boot spec,
// without; a template's loader variables never reach the agent's own start; the egress policy a
// create or PUT /network asks for, validated, null for the default.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { TakeAsk } from '../../node/types.js';
import { DEFAULT_EGRESS } from '../../runtime/egress-policy.js';
import { withSandboxId } from '../../runtime/sandbox-identity.js';
import { buildSandboxHarness, rejectsWith } from '../../testing/sandbox-harness.js';
import { AGENT_MALLOC_TUNABLES, bootSpec, egressFrom, specFor, type SpecSource } from './spec.js';

const LOADER_RE = /^(LD_|NODE_|OPENSSL_|GCONV_PATH$)/;
const ID = 'sbabcdefgh0123456789xy';
const layerPath = (l: string) => `/var/lib/sandboxd/layers/${l}`;

const src: SpecSource = {
  layers: ['top', 'base'],
  vcpu: 4,
  memoryMb: 1024,
  diskGb: 3,
  internetAccess: true,
  templateEnv: {
    PATH: '/opt/venv/bin:/usr/bin:/bin',
    LANG: 'en_US.UTF-8',
    LD_PRELOAD: '/usr/lib/libjemalloc.so',
    LD_LIBRARY_PATH: '/opt/lib',
    NODE_OPTIONS: '--require /opt/hook.js',
    NODE_PATH: '/opt/node_modules',
    OPENSSL_CONF: '/etc/ssl/custom.cnf',
    OPENSSL_MODULES: '/opt/ossl-modules',
    GCONV_PATH: '/opt/gconv',
    // Near misses: not loader variables.
    GCONV_PATHS: 'plain',
    MY_LD_PRELOAD: 'plain',
    SANDBOXD_AGENT_WORKSPACE: '/workspace',
    // What the service sets itself: a template cannot set it for the agent.
    SANDBOXD_ENV_VARS: '{"FORGED":"1"}',
    SANDBOXD_LOADER_ENV: '{}',
    GLIBC_TUNABLES: 'glibc.malloc.check=3',
    SANDBOX_ID: 'sbforged',
  },
  envVars: { API_KEY: 'k', LD_PRELOAD: '/home/user/mine.so' },
  egress: { internet: true, allow: [], deny: ['203.0.113.0/24'] },
};

test("a row's spec: its identity, layers, limits and policy; the template's loader variables go to SANDBOXD_LOADER_ENV and never to the agent's own env", () => {
  const spec = specFor(ID, src, layerPath);
  assert.deepEqual([spec.id, spec.hostname, spec.env.SANDBOX_ID], [ID, 'sandbox-abcdefgh', ID]);
  assert.deepEqual(spec.lowerDirs, ['/var/lib/sandboxd/layers/top', '/var/lib/sandboxd/layers/base']);
  assert.deepEqual(spec.layerIds, ['top', 'base']);
  assert.deepEqual(spec.resources, { vcpu: 4, memoryMb: 1024, diskGb: 3, pidsMax: 1024 });
  assert.equal(specFor(ID, { ...src, vcpu: 1 }, layerPath).resources.pidsMax, 512, 'never fewer than 512 processes');
  assert.equal(spec.internetAccess, true);
  assert.deepEqual(spec.egress, src.egress);
  assert.deepEqual(specFor(ID, { ...src, egress: null }, layerPath).egress, DEFAULT_EGRESS);

  assert.deepEqual(Object.keys(spec.env).filter((k) => LOADER_RE.test(k)), [], 'no loader variable in the agent env');
  assert.deepEqual(JSON.parse(spec.env.SANDBOXD_LOADER_ENV!), {
    LD_PRELOAD: '/usr/lib/libjemalloc.so',
    LD_LIBRARY_PATH: '/opt/lib',
    NODE_OPTIONS: '--require /opt/hook.js',
    NODE_PATH: '/opt/node_modules',
    OPENSSL_CONF: '/etc/ssl/custom.cnf',
    OPENSSL_MODULES: '/opt/ossl-modules',
    GCONV_PATH: '/opt/gconv',
  });
  assert.deepEqual([spec.env.GCONV_PATHS, spec.env.MY_LD_PRELOAD], ['plain', 'plain']);
  assert.deepEqual([spec.env.PATH, spec.env.LANG, spec.env.HOME, spec.env.TERM], ['/opt/venv/bin:/usr/bin:/bin', 'en_US.UTF-8', '/root', 'xterm-256color'], "the template's own over the defaults");
  assert.equal(spec.env.SANDBOXD_AGENT_WORKSPACE, '/workspace');
  // The create's env_vars go to the agent as data, for its programs (a loader variable among them too).
  assert.deepEqual(JSON.parse(spec.env.SANDBOXD_ENV_VARS!), { API_KEY: 'k', LD_PRELOAD: '/home/user/mine.so' });
  assert.equal(spec.env.GLIBC_TUNABLES, AGENT_MALLOC_TUNABLES);
  assert.deepEqual(JSON.parse(spec.env.SANDBOXD_LIMITS!), { vcpu: 4, memory_mb: 1024, disk_mb: 3072 });
});

test("a create's boot spec has no identity, no env_vars and the default policy; given an identity, it is the row's spec of a sandbox with neither", () => {
  const boot = bootSpec(src, layerPath);
  assert.deepEqual([boot.id, boot.hostname], ['', '']);
  assert.ok(!('SANDBOX_ID' in boot.env), 'no SANDBOX_ID: the node gives it');
  assert.equal(boot.env.SANDBOXD_ENV_VARS, '{}', "the create's env_vars are set on the agent when it is taken, not booted into it");
  assert.deepEqual(boot.egress, DEFAULT_EGRESS, "booted open: the create's policy is set as it is handed out");
  assert.deepEqual(Object.keys(boot.env).filter((k) => LOADER_RE.test(k)), []);
  assert.deepEqual(withSandboxId(boot, ID), specFor(ID, { ...src, envVars: {}, egress: null }, layerPath));
  // One boot spec for every create of a source, whatever its env_vars and policy: the warm pool's key.
  assert.deepEqual(bootSpec({ ...src, envVars: { OTHER: '1' }, egress: null }, layerPath), boot);
});

test('egressFrom: null for the default; a restricted policy normalized and deduplicated; a bad entry is VALIDATION_ERROR', async () => {
  for (const body of [{}, { internet_access: true }, { allow_out: [], deny_out: [] }, { internet_access: true, allow_out: [] }]) {
    assert.equal(egressFrom(body), null, JSON.stringify(body));
  }
  assert.deepEqual(egressFrom({ internet_access: false }), { internet: false, allow: [], deny: [] });
  assert.deepEqual(egressFrom({ deny_out: ['Example.COM.', 'example.com', ' 10.1.2.3/8 ', '*.Tracker.io'] }), { internet: true, allow: [], deny: ['example.com', '10.0.0.0/8', '*.tracker.io'] });
  assert.deepEqual(egressFrom({ internet_access: false, allow_out: ['pypi.org', '192.0.2.7'] }), { internet: false, allow: ['pypi.org', '192.0.2.7'], deny: [] });
  const bad = async (body: Parameters<typeof egressFrom>[0], field: string) => rejectsWith((async () => egressFrom(body))(), 'VALIDATION_ERROR', { field });
  await bad({ allow_out: ['2001:db8::1'] }, 'allow_out');
  await bad({ deny_out: ['example.com:443'] }, 'deny_out');
  await bad({ deny_out: ['a.*.example.com'] }, 'deny_out');
  await bad({ allow_out: [''] }, 'allow_out');
  await bad({ allow_out: ['10.0.0.256'] }, 'allow_out');
  await bad({ deny_out: Array.from({ length: 1001 }, (_, i) => `h${i}.example.com`) }, 'deny_out');
});

test("on the fake node: a create asks for the boot spec with its env_vars and policy beside it; the row's spec (a start's) carries both", async () => {
  const h = await buildSandboxHarness();
  try {
    const asks: TakeAsk[] = [];
    const take = h.node.take.bind(h.node);
    h.node.take = (ask) => {
      asks.push(ask);
      return take(ask);
    };
    const { sandbox } = await h.create(h.orgs.a, { env_vars: { SECRET: 's3' }, deny_out: ['203.0.113.9'] });
    assert.equal(asks.length, 1);
    const ask = asks[0]!;
    assert.deepEqual([ask.spec.id, ask.spec.env.SANDBOXD_ENV_VARS, 'SANDBOX_ID' in ask.spec.env], ['', '{}', false]);
    assert.deepEqual(ask.spec.egress, DEFAULT_EGRESS);
    assert.deepEqual(ask.env, { SECRET: 's3' });
    assert.deepEqual(ask.egress, { internet: true, allow: [], deny: ['203.0.113.9'] });
    const spec = h.sandboxes.spec(await h.row(sandbox.id));
    assert.deepEqual([spec.id, spec.env.SANDBOX_ID, spec.env.SANDBOXD_ENV_VARS], [sandbox.id, sandbox.id, '{"SECRET":"s3"}']);
    assert.deepEqual(spec.egress, ask.egress);
    assert.deepEqual(withSandboxId({ ...ask.spec, egress: spec.egress, env: { ...ask.spec.env, SANDBOXD_ENV_VARS: '{"SECRET":"s3"}' } }, sandbox.id), spec, 'the same sandbox, told its env and policy');
  } finally {
    await h.close();
  }
});
