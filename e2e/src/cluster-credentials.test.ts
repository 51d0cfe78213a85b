// A node's registry credential over its life, on a cluster on this machine (PostgreSQL, control, a
// node registering through control with a credential and no database access): a credential past
// half its life is renewed by the node, which writes the new one over its file; a node removed with
// `sandboxd nodes remove --force` is refused with the credential it holds and says so in its log,
// also once restarted, and comes back with a credential made after the removal.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { testClusterKeyFiles } from '../../packages/server/dist/testing/cluster-keys.js';
import { startPostgres, type TestPostgres } from '../../packages/server/dist/testing/postgres.js';
import { freePort, REPO_ROOT, startServer, stopAll, type TestServer } from './harness.js';
import { startNode, type TestNode } from './harness-node.js';

const ID = 'e2e-cred-node';
const DAY_MS = 86_400_000;
const LEASE_SECONDS = 3;

describe("a node's registry credential: renewed by the node, refused once the node is removed", { timeout: 600_000 }, () => {
  let pg: TestPostgres;
  let dbUrl: string;
  let control: TestServer;
  let node: TestNode;
  const keys = testClusterKeyFiles();
  const credentialFile = join(dirname(keys.signingKeyFile), 'node.credential');
  /** What the node was started with: made 20 days ago for 30, so past half its life. */
  let first: string;

  const cli = (...args: string[]) => {
    const r = spawnSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), ...args], {
      env: { ...process.env, SANDBOXD_DATABASE_URL: dbUrl, SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile },
      encoding: 'utf8',
    });
    assert.equal(r.status, 0, `${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  const listed = () => (JSON.parse(cli('nodes', 'list', '--json')) as Array<{ id: string; up: boolean }>).find((n) => n.id === ID);
  const until = async (what: string, check: () => boolean, ms = 20_000) => {
    for (const end = Date.now() + ms; Date.now() < end && !check(); ) await new Promise((r) => setTimeout(r, 200));
    assert.ok(check(), `${what} (within ${ms / 1000} s; the node's log: ${node?.logFile})`);
  };
  const credential = () => readFileSync(credentialFile, 'utf8').trim();
  /** The node's log from `from` (bytes) on: what a run of it said. */
  const logSince = (from: number) => readFileSync(node.logFile).subarray(from).toString('utf8');
  const registryCall = (path: string, token: string) => fetch(`${control.baseUrl}${path}`, { headers: { authorization: `Bearer ${token}` } });

  before(async () => {
    pg = await startPostgres();
    dbUrl = await pg.createDatabase();
    first = await keys.signer.nodeCredentialFor(ID, { now: Date.now() - 20 * DAY_MS });
    writeFileSync(credentialFile, `${first}\n`, { mode: 0o600 });
    const controlPort = await freePort();
    control = await startServer({ command: 'control', templates: ['base'], env: { SANDBOXD_DATABASE_URL: dbUrl, SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile }, port: controlPort });
    node = await startNode({ id: ID, verifyKey: keys.verifyPem, leaseSeconds: LEASE_SECONDS, env: { SANDBOXD_NODE_CREDENTIAL_FILE: credentialFile, SANDBOXD_CONTROL_URL: control.baseUrl } });
  });

  after(async () => {
    await stopAll(
      () => node?.stop(),
      () => control?.stop(),
      () => pg?.stop(),
      () => keys.remove(),
    );
  });

  test('a credential past half its life is renewed at start: its file holds the new one (0600), which opens the registry', async () => {
    await until('the node registered', () => listed()?.up === true);
    // The file first, then the log line saying so.
    await until('the file changed, and the node said so', () => credential() !== first && logSince(0).includes(`node ${ID} renewed its registry credential`));
    const renewed = credential();
    const claims = await keys.signer.checkNodeCredential(renewed);
    assert.equal(claims.nodeId, ID);
    assert.ok(Math.abs(claims.issuedAt * 1000 - Date.now()) < 120_000, 'made just now');
    assert.equal(claims.expiresAt! - claims.issuedAt, 30 * 86_400, 'as long as the one it replaces');
    assert.equal(statSync(credentialFile).mode & 0o777, 0o600);
    assert.match(logSince(0), new RegExp(`node ${ID} renewed its registry credential \\(good until .*\\) and wrote it to ${credentialFile}`));
    assert.equal((await registryCall(`/internal/v1/nodes/${ID}/sandboxes`, renewed)).status, 200, 'the new one opens the registry');
    // The node beats with it: still up a few leases on.
    await new Promise((r) => setTimeout(r, 2 * LEASE_SECONDS * 1000));
    assert.equal(listed()?.up, true);
  });

  test('a node removed with `nodes remove --force` is refused with its credential, and logs it; a credential made after the removal lets it back', async () => {
    const held = credential();
    let from = statSync(node.logFile).size;
    cli('nodes', 'remove', ID, '--force');
    await until('the running node is refused at its next heartbeat, and stops', () => {
      const log = logSince(from);
      return log.includes(`(403 PERMISSION_DENIED): node ${ID} was removed from the cluster at`) && log.includes(`node ${ID} was removed from the cluster by an operator: no more heartbeats`);
    });
    assert.equal((await registryCall(`/internal/v1/nodes/${ID}/sandboxes`, held)).status, 403);

    // Restarted, it tries again with the credential in its file: refused, and it says why.
    await node.shutdown();
    from = statSync(node.logFile).size;
    await node.restart();
    await until('the restarted node is refused at registration', () => /cannot register yet .*\(403 PERMISSION_DENIED\): node e2e-cred-node was removed from the cluster at .*sandboxd cluster node-credential e2e-cred-node/.test(logSince(from)));
    assert.equal(listed(), undefined, 'not in the registry');

    // A new credential, made after the removal: the node registers with it.
    const fresh = join(dirname(keys.signingKeyFile), 'node-fresh.credential');
    assert.match(cli('cluster', 'node-credential', ID, '--out', fresh), /good until/);
    await node.shutdown();
    writeFileSync(credentialFile, readFileSync(fresh));
    from = statSync(node.logFile).size;
    await node.restart();
    await until('registered again', () => listed()?.up === true && logSince(from).includes(`node ${ID} registered`));
    assert.equal((await registryCall(`/internal/v1/nodes/${ID}/sandboxes`, held)).status, 403, 'what it held before the removal stays refused');
  });
});
