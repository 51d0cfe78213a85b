import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError, hostFacts, loadConfig } from './config/index.js';

const SMALL = { cpus: 1, memoryMb: 1000, diskGb: 8 };
const BIG = { cpus: 16, memoryMb: 65536, diskGb: 1000 };

test('default limits come from the host: cores, half its memory and disk per sandbox, all of them per organization', () => {
  assert.deepEqual(loadConfig({}, BIG).limits, {
    max_vcpu: 16,
    max_memory_mb: 32768,
    max_disk_gb: 500,
    max_sandboxes: 100,
    max_total_memory_mb: 65536,
    max_total_disk_gb: 1000,
    default_timeout_seconds: 3600,
    max_timeout_seconds: 86400,
    max_snapshot_storage_mb: 256000,
  });
});

test('on a small host the defaults still fit the built-in templates (code-interpreter: 2 vCPU, 2 GB, 10 GB)', () => {
  const l = loadConfig({}, SMALL).limits;
  assert.deepEqual([l.max_vcpu, l.max_memory_mb, l.max_disk_gb], [2, 2048, 10]);
  assert.deepEqual([l.max_total_memory_mb, l.max_total_disk_gb], [2048, 10]);
});

test('SANDBOXD_<LIMIT> sets each limit; 0 means no limit', () => {
  const l = loadConfig(
    {
      SANDBOXD_MAX_VCPU: '4',
      SANDBOXD_MAX_MEMORY_MB: '0',
      SANDBOXD_MAX_DISK_GB: '7',
      SANDBOXD_MAX_SANDBOXES: '5',
      SANDBOXD_MAX_TOTAL_MEMORY_MB: '4096',
      SANDBOXD_MAX_TOTAL_DISK_GB: '0',
      SANDBOXD_DEFAULT_TIMEOUT_SECONDS: '300',
      SANDBOXD_MAX_TIMEOUT_SECONDS: '3600',
      SANDBOXD_MAX_SNAPSHOT_STORAGE_MB: '2048',
    },
    BIG,
  ).limits;
  assert.deepEqual(l, {
    max_vcpu: 4,
    max_memory_mb: null,
    max_disk_gb: 7,
    max_sandboxes: 5,
    max_total_memory_mb: 4096,
    max_total_disk_gb: null,
    default_timeout_seconds: 300,
    max_timeout_seconds: 3600,
    max_snapshot_storage_mb: 2048,
  });
  const never = loadConfig({ SANDBOXD_DEFAULT_TIMEOUT_SECONDS: '0', SANDBOXD_MAX_TIMEOUT_SECONDS: '0' }, BIG).limits;
  assert.deepEqual([never.default_timeout_seconds, never.max_timeout_seconds], [null, null]);
});

test('the host disk admission: on with 5 % kept free and disks thinly provisioned 4× by default; a size in GB instead; off; upload retention', () => {
  assert.deepEqual(loadConfig({}, BIG).disk, { admission: true, reserve: { percent: 5 }, overcommit: 4 });
  assert.deepEqual(loadConfig({ SANDBOXD_DISK_RESERVE_PERCENT: '10', SANDBOXD_DISK_RESERVE_GB: '0.5', SANDBOXD_DISK_OVERCOMMIT: '1' }, BIG).disk, {
    admission: true,
    reserve: { percent: 10, bytes: 512 * 2 ** 20 },
    overcommit: 1,
  });
  assert.throws(() => loadConfig({ SANDBOXD_DISK_OVERCOMMIT: '0' }, BIG), /SANDBOXD_DISK_OVERCOMMIT/);
  assert.equal(loadConfig({ SANDBOXD_DISK_ADMISSION: 'off' }, BIG).disk.admission, false);
  assert.throws(() => loadConfig({ SANDBOXD_DISK_ADMISSION: 'maybe' }, BIG), /SANDBOXD_DISK_ADMISSION must be on or off/);
  assert.throws(() => loadConfig({ SANDBOXD_DISK_RESERVE_GB: '-1' }, BIG), /SANDBOXD_DISK_RESERVE_GB/);
  assert.throws(() => loadConfig({ SANDBOXD_DISK_RESERVE_PERCENT: '95' }, BIG), /SANDBOXD_DISK_RESERVE_PERCENT/);
  assert.equal(loadConfig({}, BIG).uploadRetentionMs, 168 * 3_600_000);
  assert.equal(loadConfig({ SANDBOXD_UPLOAD_RETENTION_HOURS: '0' }, BIG).uploadRetentionMs, 0);
});

test('bad limit settings are refused at start, naming the variable', () => {
  for (const [env, re] of [
    [{ SANDBOXD_MAX_MEMORY_MB: '64' }, /SANDBOXD_MAX_MEMORY_MB must be 0 \(no limit\) or at least 128/],
    [{ SANDBOXD_MAX_VCPU: 'two' }, /SANDBOXD_MAX_VCPU must be an integer/],
    [{ SANDBOXD_MAX_SANDBOXES: '-1' }, /SANDBOXD_MAX_SANDBOXES/],
    [{ SANDBOXD_DEFAULT_TIMEOUT_SECONDS: '7200', SANDBOXD_MAX_TIMEOUT_SECONDS: '3600' }, /must not be above SANDBOXD_MAX_TIMEOUT_SECONDS/],
    [{ SANDBOXD_DEFAULT_TIMEOUT_SECONDS: '0' }, /never expire\) needs SANDBOXD_MAX_TIMEOUT_SECONDS=0/],
  ] as const) {
    assert.throws(() => loadConfig(env, BIG), (err: unknown) => err instanceof ConfigError && re.test(err.message));
  }
});

test('host facts are read from this machine: cores, memory, and the filesystem of the data dir (or its nearest parent)', () => {
  const f = hostFacts('/nonexistent/sandboxd/data');
  assert.ok(f.cpus >= 1 && f.memoryMb > 100 && f.diskGb >= 1, JSON.stringify(f));
});

test('the warm pool: a tenth of the host memory (at most 4 GiB), 5 % of it at rest, 2 ready per key, 90 s of demand, two boots per core', () => {
  assert.deepEqual(loadConfig({}, BIG).warmPool, { minPerKey: 2, maxMemoryMb: 4096, reserve: 327, horizonSeconds: 90, shrinkAfterSeconds: 30, bootConcurrency: 32 });
  assert.deepEqual(loadConfig({}, SMALL).warmPool, { minPerKey: 2, maxMemoryMb: 100, reserve: 5, horizonSeconds: 90, shrinkAfterSeconds: 30, bootConcurrency: 2 });
  // The reference host (24 GiB, 2 cores) and a small machine (8 GiB): the reserve follows the memory.
  assert.deepEqual(loadConfig({}, { cpus: 2, memoryMb: 24 * 1024, diskGb: 100 }).warmPool, { minPerKey: 2, maxMemoryMb: 2457, reserve: 122, horizonSeconds: 90, shrinkAfterSeconds: 30, bootConcurrency: 4 });
  assert.deepEqual(loadConfig({}, { cpus: 2, memoryMb: 8 * 1024, diskGb: 100 }).warmPool, { minPerKey: 2, maxMemoryMb: 819, reserve: 40, horizonSeconds: 90, shrinkAfterSeconds: 30, bootConcurrency: 4 });
  // A budget set below the memory-sized reserve bounds it.
  assert.equal(loadConfig({ SANDBOXD_WARM_POOL_MAX_MEMORY_MB: '200' }, BIG).warmPool.reserve, 20);
  const set = loadConfig(
    {
      SANDBOXD_WARM_POOL_SIZE: '0',
      SANDBOXD_WARM_POOL_MAX_MEMORY_MB: '0',
      SANDBOXD_WARM_POOL_HORIZON_SECONDS: '5',
      SANDBOXD_WARM_POOL_SHRINK_AFTER_SECONDS: '2',
      SANDBOXD_BOOT_CONCURRENCY: '3',
      SANDBOXD_WARM_POOL_RESERVE: '7',
    },
    BIG,
  ).warmPool;
  assert.deepEqual(set, { minPerKey: 0, maxMemoryMb: 0, reserve: 7, horizonSeconds: 5, shrinkAfterSeconds: 2, bootConcurrency: 3 });
});

test('bad warm pool settings are refused at start, naming the variable and why', () => {
  for (const [env, re] of [
    [{ SANDBOXD_WARM_POOL_MAX_MEMORY_MB: '5' }, /SANDBOXD_WARM_POOL_MAX_MEMORY_MB must be 0 \(no warm pool\) or at least 10 \(one ready sandbox costs ~10 MiB\), got "5"/],
    [{ SANDBOXD_WARM_POOL_MAX_MEMORY_MB: '70000' }, /SANDBOXD_WARM_POOL_MAX_MEMORY_MB \(70000\) must not be above the host's memory \(65536 MB\)/],
    [{ SANDBOXD_WARM_POOL_MAX_MEMORY_MB: '1.5G' }, /SANDBOXD_WARM_POOL_MAX_MEMORY_MB must be an integer/],
    [{ SANDBOXD_WARM_POOL_SIZE: '51' }, /SANDBOXD_WARM_POOL_SIZE must be an integer in \[0, 50\]/],
    [{ SANDBOXD_WARM_POOL_RESERVE: 'many' }, /SANDBOXD_WARM_POOL_RESERVE must be an integer in \[0, 100000\]/],
    [{ SANDBOXD_WARM_POOL_HORIZON_SECONDS: '-1' }, /SANDBOXD_WARM_POOL_HORIZON_SECONDS must be an integer in \[0, 3600\]/],
    [{ SANDBOXD_WARM_POOL_SHRINK_AFTER_SECONDS: '0' }, /SANDBOXD_WARM_POOL_SHRINK_AFTER_SECONDS must be an integer in \[1, 86400\]/],
    [{ SANDBOXD_BOOT_CONCURRENCY: '0' }, /SANDBOXD_BOOT_CONCURRENCY must be an integer in \[1, 256\]/],
  ] as const) {
    assert.throws(() => loadConfig(env, BIG), (err: unknown) => err instanceof ConfigError && re.test(err.message), JSON.stringify(env));
  }
});

test("a node's layers cache: a quarter of the data disk, a week idle, ten minutes' grace; fractions of a GB and 0 (no limit) taken; nonsense refused", () => {
  const GB = 1024 ** 3;
  assert.deepEqual(loadConfig({}, BIG).nodeLayerCache, { budgetBytes: 250 * GB, maxIdleMs: 7 * 24 * 3_600_000, minAgeMs: 600_000, explicit: false });
  assert.equal(loadConfig({}, { ...SMALL, diskGb: 2 }).nodeLayerCache.budgetBytes, GB, 'at least 1 GB');
  assert.deepEqual(
    loadConfig({ SANDBOXD_NODE_LAYER_CACHE_GB: '0.5', SANDBOXD_NODE_LAYER_MAX_IDLE_HOURS: '0', SANDBOXD_NODE_LAYER_MIN_AGE_SECONDS: '5' }, BIG).nodeLayerCache,
    { budgetBytes: GB / 2, maxIdleMs: 0, minAgeMs: 5000, explicit: true },
  );
  assert.equal(loadConfig({ SANDBOXD_NODE_LAYER_CACHE_GB: '0' }, BIG).nodeLayerCache.budgetBytes, 0);
  for (const [env, re] of [
    [{ SANDBOXD_NODE_LAYER_CACHE_GB: '-1' }, /SANDBOXD_NODE_LAYER_CACHE_GB must be a number of GB from 0 \(no budget\) up, got "-1"/],
    [{ SANDBOXD_NODE_LAYER_CACHE_GB: '10G' }, /SANDBOXD_NODE_LAYER_CACHE_GB must be a number/],
    [{ SANDBOXD_NODE_LAYER_MAX_IDLE_HOURS: '1.5' }, /SANDBOXD_NODE_LAYER_MAX_IDLE_HOURS must be an integer/],
    [{ SANDBOXD_NODE_LAYER_MIN_AGE_SECONDS: '0' }, /SANDBOXD_NODE_LAYER_MIN_AGE_SECONDS must be an integer in \[1, 86400\]/],
  ] as const) {
    assert.throws(() => loadConfig(env, BIG), (err: unknown) => err instanceof ConfigError && re.test(err.message), JSON.stringify(env));
  }
});

test('SANDBOXD_DATABASE_URL: unset (or empty) keeps SQLite in the data dir; a PostgreSQL URL is taken as it is; anything else is refused without echoing it', () => {
  assert.equal(loadConfig({}, BIG).databaseUrl, undefined);
  assert.equal(loadConfig({ SANDBOXD_DATABASE_URL: ' ' }, BIG).databaseUrl, undefined);
  for (const url of ['postgresql://sbd:s3cret@db.internal:5432/sandboxd?sslmode=require', 'postgres://sbd:s3cret@/sandboxd?host=/run/postgresql']) {
    assert.equal(loadConfig({ SANDBOXD_DATABASE_URL: url }, BIG).databaseUrl, url);
  }
  for (const [url, re] of [
    ['mysql://root:s3cret@db/sandboxd', /SANDBOXD_DATABASE_URL must be a postgres:\/\/ or postgresql:\/\/ URL .*, got a mysql:\/\/ URL, not a PostgreSQL one$/],
    ['s3cret', /SANDBOXD_DATABASE_URL must be .*, got something that is not a URL$/],
    ['postgresql://root:s3cret@[db/sandboxd', /SANDBOXD_DATABASE_URL must be .*, got a postgresql:\/\/ URL that does not parse$/],
  ] as const) {
    assert.throws(
      () => loadConfig({ SANDBOXD_DATABASE_URL: url }, BIG),
      (err: unknown) => err instanceof ConfigError && re.test(err.message) && !err.message.includes('s3cret'),
      url,
    );
  }
});

test('a cluster node: its id, where its API listens and is reached', async () => {
  const { hostname } = await import('node:os');
  const d = loadConfig({}, BIG).node;
  assert.equal(d.id, hostname().split('.')[0]!.toLowerCase().replace(/[^a-z0-9-]/g, '-').replace(/^-+/, '').slice(0, 63) || 'node');
  assert.deepEqual([d.listen, d.url, d.signingKey, d.signingKeyFile, d.verifyKey], [{ host: '127.0.0.1', port: 7070 }, 'http://127.0.0.1:7070', null, null, null]);
  assert.deepEqual(loadConfig({ SANDBOXD_OVERCOMMIT_CPU: '8', SANDBOXD_OVERCOMMIT_MEMORY: '1' }, BIG).node.overcommit, { cpu: 8, memory: 1 });
  const n = loadConfig({ SANDBOXD_NODE_ID: 'node-7', SANDBOXD_NODE_LISTEN: '0.0.0.0:7171', SANDBOXD_NODE_URL: 'http://10.0.0.7:7171/' }, BIG).node;
  assert.deepEqual(n, { id: 'node-7', listen: { host: '0.0.0.0', port: 7171 }, url: 'http://10.0.0.7:7171', signingKey: null, signingKeyFile: null, verifyKey: null, credential: null, credentialFile: null, controlUrls: [], tls: null, clusterCa: null, overcommit: { cpu: 16, memory: 1.5 }, leaseSeconds: 15, maxSandboxes: 1000, orphanGraceSeconds: 300, claimSeconds: 30 });
  for (const [env, re] of [
    [{ SANDBOXD_NODE_ID: 'Node_1' }, /SANDBOXD_NODE_ID must be lowercase/],
    [{ SANDBOXD_NODE_ID: 'a'.repeat(64) }, /SANDBOXD_NODE_ID/],
    [{ SANDBOXD_NODE_LISTEN: '7070' }, /SANDBOXD_NODE_LISTEN must be host:port/],
    [{ SANDBOXD_NODE_LISTEN: 'h:70000' }, /SANDBOXD_NODE_LISTEN/],
    [{ SANDBOXD_NODE_URL: 'https://n:1/x' }, /SANDBOXD_NODE_URL must be http:\/\/host:port/],
    [{ SANDBOXD_NODE_URL: 'https://n:1' }, /https:\/\/ needs SANDBOXD_NODE_TLS_CERT_FILE/],
    [{ SANDBOXD_NODE_TLS_CERT_FILE: '/etc/hostname' }, /needs both SANDBOXD_NODE_TLS_CERT_FILE and SANDBOXD_NODE_TLS_KEY_FILE/],
    [{ SANDBOXD_NODE_TLS_CERT_FILE: '/nonexistent/c.pem', SANDBOXD_NODE_TLS_KEY_FILE: '/nonexistent/k.pem' }, /SANDBOXD_NODE_TLS_CERT_FILE cannot be read/],
    [{ SANDBOXD_NODE_TLS_CERT_FILE: '/etc/hostname', SANDBOXD_NODE_TLS_KEY_FILE: '/etc/hostname' }, /holds no PEM certificate/],
    [{ SANDBOXD_CLUSTER_CA_FILE: '/etc/hostname' }, /SANDBOXD_CLUSTER_CA_FILE holds no PEM certificate/],
    [{ SANDBOXD_NODE_CREDENTIAL: 'not a token' }, /the node credential .* is not one/],
    [{ SANDBOXD_CONTROL_URL: 'http://REPLACE_ME:8080' }, /SANDBOXD_CONTROL_URL must be http\(s\):\/\/host:port/],
    [{ SANDBOXD_OVERCOMMIT_CPU: '0.5' }, /SANDBOXD_OVERCOMMIT_CPU must be a number from 1/],
    [{ SANDBOXD_OVERCOMMIT_MEMORY: 'lots' }, /SANDBOXD_OVERCOMMIT_MEMORY/],
  ] as Array<[Record<string, string>, RegExp]>) {
    assert.throws(() => loadConfig(env, BIG), (err: unknown) => err instanceof ConfigError && re.test(err.message), JSON.stringify(env));
  }
});

test('a node over TLS: its certificate and key, an https:// URL by default; control and edge: the CA they check nodes against', async () => {
  const { makeTestTls } = await import('./testing/tls.js');
  const tls = makeTestTls(['IP:10.0.0.7']);
  try {
    const n = loadConfig({ SANDBOXD_NODE_LISTEN: '10.0.0.7:7070', SANDBOXD_NODE_TLS_CERT_FILE: tls.certFile, SANDBOXD_NODE_TLS_KEY_FILE: tls.keyFile }, BIG).node;
    assert.deepEqual([n.url, n.tls?.cert, n.tls?.key], ['https://10.0.0.7:7070', tls.cert, tls.key]);
    assert.throws(() => loadConfig({ SANDBOXD_NODE_TLS_CERT_FILE: tls.certFile, SANDBOXD_NODE_TLS_KEY_FILE: tls.keyFile, SANDBOXD_NODE_URL: 'http://10.0.0.7:7070' }, BIG), /SANDBOXD_NODE_URL must be https:\/\/host:port \(the node API is served over TLS\)/);
    assert.equal(loadConfig({ SANDBOXD_CLUSTER_CA_FILE: tls.caFile }, BIG).node.clusterCa, tls.ca);
  } finally {
    tls.remove();
  }
});

test("the cluster's keys: control's signing key from a file, a node's verify key from a file or inline; the wrong key refused", async () => {
  const { mkdtempSync, writeFileSync, rmSync } = await import('node:fs');
  const { generateKeyPairSync } = await import('node:crypto');
  const { generateClusterKeyPair } = await import('./runtime/cluster-auth.js');
  const { signingPem, verifyPem } = generateClusterKeyPair();
  const dir = mkdtempSync('/tmp/sbd-cluster-keys-');
  try {
    const file = (name: string, text: string | Buffer) => {
      writeFileSync(`${dir}/${name}`, text, { mode: 0o600 });
      return `${dir}/${name}`;
    };
    const signing = file('cluster-signing.pem', signingPem);
    const verify = file('cluster-verify.pem', verifyPem);
    const control = loadConfig({ SANDBOXD_CLUSTER_SIGNING_KEY_FILE: signing }, BIG).node;
    assert.deepEqual([control.signingKey?.type, control.signingKey?.asymmetricKeyType, control.signingKeyFile, control.verifyKey], ['private', 'ed25519', signing, null]);
    const node = loadConfig({ SANDBOXD_CLUSTER_VERIFY_KEY_FILE: verify }, BIG).node;
    assert.deepEqual([node.signingKey, node.verifyKey?.type, node.verifyKey?.asymmetricKeyType], [null, 'public', 'ed25519']);
    const inline = loadConfig({ SANDBOXD_CLUSTER_VERIFY_KEY: verifyPem }, BIG).node.verifyKey!;
    assert.ok(inline.equals(node.verifyKey!), 'the inline PEM is the same key');
    // The old shared secret is not read at all.
    assert.deepEqual(loadConfig({ SANDBOXD_CLUSTER_SECRET: 'x'.repeat(64) }, BIG).node.verifyKey, null);

    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
    for (const [env, re] of [
      // A node given the private key refuses: it needs the public key only.
      [{ SANDBOXD_CLUSTER_VERIFY_KEY_FILE: signing }, /^SANDBOXD_CLUSTER_VERIFY_KEY_FILE \(.*cluster-signing\.pem\): it holds a private key: a node needs the public key only/],
      [{ SANDBOXD_CLUSTER_VERIFY_KEY: signingPem }, /^SANDBOXD_CLUSTER_VERIFY_KEY: it holds a private key: a node needs the public key only/],
      [{ SANDBOXD_CLUSTER_SIGNING_KEY_FILE: verify }, /^SANDBOXD_CLUSTER_SIGNING_KEY_FILE \(.*\): it holds a public key: control signs with the private key/],
      [{ SANDBOXD_CLUSTER_SIGNING_KEY_FILE: `${dir}/missing` }, /^SANDBOXD_CLUSTER_SIGNING_KEY_FILE cannot be read: ENOENT/],
      [{ SANDBOXD_CLUSTER_VERIFY_KEY_FILE: `${dir}/missing` }, /^SANDBOXD_CLUSTER_VERIFY_KEY_FILE cannot be read: ENOENT/],
      [{ SANDBOXD_CLUSTER_SIGNING_KEY_FILE: file('junk', 'REPLACE_ME') }, /SANDBOXD_CLUSTER_SIGNING_KEY_FILE .*: it is not a PEM private key/],
      [{ SANDBOXD_CLUSTER_VERIFY_KEY: 'REPLACE_ME' }, /^SANDBOXD_CLUSTER_VERIFY_KEY: it is not a PEM public key/],
      [{ SANDBOXD_CLUSTER_SIGNING_KEY_FILE: file('rsa.pem', rsa.privateKey.export({ type: 'pkcs8', format: 'pem' })) }, /an rsa key; the cluster's key is Ed25519/],
      [{ SANDBOXD_CLUSTER_VERIFY_KEY: rsa.publicKey.export({ type: 'spki', format: 'pem' }).toString() }, /an rsa key; the cluster's key is Ed25519/],
      [{ SANDBOXD_CLUSTER_VERIFY_KEY_FILE: verify, SANDBOXD_CLUSTER_VERIFY_KEY: verifyPem }, /set one of SANDBOXD_CLUSTER_VERIFY_KEY_FILE and SANDBOXD_CLUSTER_VERIFY_KEY, not both/],
    ] as Array<[Record<string, string>, RegExp]>) {
      assert.throws(() => loadConfig(env, BIG), (err: unknown) => err instanceof ConfigError && re.test(err.message), Object.keys(env).join(','));
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
