import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { SqliteStore } from './store/sqlite.js';
import { insertSandboxRow } from './testing/store-rows.js';

const CLI = fileURLToPath(new URL('./cli.js', import.meta.url));

function status(env: Record<string, string>, ...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, 'cluster', 'status', ...args], { env: { PATH: process.env.PATH ?? '', ...env }, encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

test('cluster status of a data directory no daemon used: exit 1, said so, and no database made', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-status-'));
  try {
    const r = status({ SANDBOXD_DATA_DIR: dir });
    assert.equal(r.code, 1, r.err);
    assert.match(r.out, /^store {6}SQLite at .*sandboxd\.db: cannot be read: there is no database: no daemon has run with SANDBOXD_DATA_DIR=/);
    assert.match(r.out, /verdict {4}DOWN/);
    assert.equal(existsSync(join(dir, 'sandboxd.db')), false);
    const j = JSON.parse(status({ SANDBOXD_DATA_DIR: dir }, '--json').out);
    assert.deepEqual([j.verdict, j.store.reachable, j.store.dialect], ['down', false, 'sqlite']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('cluster status of a PostgreSQL store that does not answer: exit 1, DOWN, the password nowhere', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-status-'));
  try {
    const env = { SANDBOXD_DATA_DIR: dir, SANDBOXD_DATABASE_URL: 'postgresql://sandboxd:s3cret-pw@127.0.0.1:1/sandboxd' };
    const r = status(env, '--json');
    assert.equal(r.code, 1, r.err);
    const j = JSON.parse(r.out);
    assert.deepEqual([j.verdict, j.store.dialect, j.store.reachable, j.store.where], ['down', 'postgres', false, 'postgresql://sandboxd@127.0.0.1:1/sandboxd']);
    assert.match(j.store.error, /unavailable/);
    const text = status(env);
    assert.equal(text.code, 1);
    assert.match(text.out, /^verdict {4}DOWN: the store cannot be read$/m);
    assert.ok(!(r.out + r.err + text.out + text.err).includes('s3cret-pw'));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('cluster status of an all-in-one: its daemon and what it holds; exit 0 while it runs, 1 once it stopped', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-status-'));
  try {
    const store = SqliteStore.open(join(dir, 'sandboxd.db'));
    const at = new Date().toISOString();
    await store.replicas.beat({ id: 'box:42:abcdef', role: 'serve', hostname: 'box', pid: 42, url: 'http://127.0.0.1:8080', version: '0.1.0', startedAt: at });
    await insertSandboxRow(store, 'sb1', 'box');
    let r = status({ SANDBOXD_DATA_DIR: dir });
    assert.equal(r.code, 0, r.out + r.err);
    assert.match(r.out, /^mode {7}all-in-one$/m);
    assert.match(r.out, /^daemon {5}1 up$/m);
    assert.match(r.out, /box:42:abcdef\s+up\s+box\s+42\s+http:\/\/127\.0\.0\.1:8080\s+0\.1\.0/);
    assert.match(r.out, /^nodes {6}this machine, in the daemon's own process/m);
    assert.match(r.out, /^sandboxes {2}1 active, 0 stopped: 2 vCPU, 1024 MB of memory, 5 GB of disk$/m);
    assert.match(r.out, /^verdict {4}OK$/m);
    const j = JSON.parse(status({ SANDBOXD_DATA_DIR: dir }, '--json').out);
    assert.deepEqual([j.verdict, j.mode, j.store.schema_version === j.store.schema_latest, j.replicas[0].state, j.sandboxes.active, j.nodes], ['ok', 'all-in-one', true, 'up', 1, []]);

    await store.replicas.stopped('box:42:abcdef');
    r = status({ SANDBOXD_DATA_DIR: dir });
    assert.equal(r.code, 1);
    assert.match(r.out, /^verdict {4}DOWN: no all-in-one daemon is up: the last, box:42:abcdef, stopped \d+ s ago$/m);
    store.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
