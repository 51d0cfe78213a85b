import assert from 'node:assert/strict';
import { chmodSync, statSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { migrationsFor } from './migrations.js';
import { SqliteStore } from './sqlite.js';
import { storeConformance } from './conformance.js';

storeConformance('SqliteStore', async () => SqliteStore.open(':memory:'));

test('the database, its WAL and SHM are 0600, also when an older installation made them 0644', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sbd-db-'));
  try {
    const file = join(dir, 'sandboxd.db');
    const store = SqliteStore.open(file);
    await store.orgs.create('acme');
    for (const f of [file, `${file}-wal`, `${file}-shm`]) assert.equal(statSync(f).mode & 0o777, 0o600, f);
    store.close();
    chmodSync(file, 0o644);
    SqliteStore.open(file).close();
    assert.equal(statSync(file).mode & 0o777, 0o600);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test('upload rows written before uploads had to be verified are dropped by the migration', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sbd-db-'));
  try {
    const file = join(dir, 'sandboxd.db');
    const steps = migrationsFor('sqlite');
    const drop = steps.findIndex((m) => /DELETE FROM uploads/.test(m));
    assert.ok(drop > 0);
    const db = new Database(file);
    for (let i = 0; i < drop; i++) db.exec(steps[i]!);
    db.pragma(`user_version = ${drop}`);
    db.prepare('INSERT INTO uploads (org_id, file_id, path, sha256, size, kind, created_at) VALUES (?,?,?,?,?,?,?)').run('org_b', 'f_x', 'a.txt', 'x', 1, 'file', 'now');
    db.close();
    const store = SqliteStore.open(file);
    assert.equal(await store.uploads.byFileId('org_b', 'f_x'), undefined, 'a link-time row does not prove possession');
    await store.uploads.upsert({ orgId: 'org_b', fileId: 'f_x', path: 'a.txt', sha256: 'x', size: 1, kind: 'file', createdAt: 'now' });
    assert.ok(await store.uploads.byFileId('org_b', 'f_x'));
    store.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("keys of the operator's organization lose the admin every key got by default, but the bootstrap key; other organizations' keep theirs", async () => {
  const dir = await mkdtemp(join(tmpdir(), 'sbd-db-'));
  try {
    const file = join(dir, 'sandboxd.db');
    const steps = migrationsFor('sqlite');
    const strip = steps.findIndex((m) => /json_group_array\(value\)/.test(m) && /'admin'/.test(m));
    assert.ok(strip > 0);
    const db = new Database(file);
    for (let i = 0; i < strip; i++) db.exec(steps[i]!);
    db.pragma(`user_version = ${strip}`);
    const org = db.prepare('INSERT INTO organizations (id, name, created_at) VALUES (?, ?, ?)');
    org.run('org_def', 'default', 'now');
    org.run('org_acme', 'acme', 'now');
    const key = db.prepare('INSERT INTO api_keys (id, org_id, name, hash, scopes, created_at) VALUES (?,?,?,?,?,?)');
    const all = JSON.stringify(['sandboxes:read', 'sandboxes:write', 'templates:read', 'templates:write', 'metrics:read', 'admin']);
    key.run('key_boot', 'org_def', 'bootstrap', 'h1', all, 'now');
    key.run('key_ci', 'org_def', 'ci', 'h2', all, 'now');
    key.run('key_ro', 'org_def', 'ro', 'h3', JSON.stringify(['sandboxes:read']), 'now');
    key.run('key_acme', 'org_acme', 'default', 'h4', all, 'now');
    db.close();
    const store = SqliteStore.open(file);
    assert.deepEqual((await store.keys.byId('key_boot'))!.scopes, JSON.parse(all));
    assert.deepEqual((await store.keys.byId('key_ci'))!.scopes, ['sandboxes:read', 'sandboxes:write', 'templates:read', 'templates:write', 'metrics:read']);
    assert.deepEqual((await store.keys.byId('key_ro'))!.scopes, ['sandboxes:read']);
    assert.deepEqual((await store.keys.byId('key_acme'))!.scopes, JSON.parse(all), "admin on another organization's key reaches that organization only");
    store.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
