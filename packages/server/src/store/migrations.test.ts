import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MIGRATIONS, migrationsFor, type DialectName } from './migrations.js';

/** Each dialect's steps by the version that records them: what databases out there have taken. */
const SHIPPED: Record<DialectName, string[]> = {
  sqlite: [
    'organizations, keys, templates, sandboxes and kv',
    'builds and uploads',
    'organization limits',
    'drop unverified uploads',
    'sandboxes by gateway port',
    'organization usage',
    'deleted sandboxes by time',
    'admin only for the bootstrap key',
    'sleeping sandboxes',
    'previews',
    'egress policies',
    'snapshots',
    'sandboxes by node',
    'nodes',
    'rate events',
    'upload blobs and build logs',
    'build heartbeat',
  ],
  postgres: ['the PostgreSQL store, as the SQLite schema had come to', 'sandboxes by node', 'nodes', 'rate events', 'upload blobs and build logs', 'build heartbeat'],
};

test('every step a release shipped keeps its version in each dialect: the list only grows at its end', () => {
  for (const dialect of ['sqlite', 'postgres'] as const) {
    const names = MIGRATIONS.filter((m) => m[dialect] !== null).map((m) => m.name);
    assert.deepEqual(names.slice(0, SHIPPED[dialect].length), SHIPPED[dialect], dialect);
    assert.equal(migrationsFor(dialect).length, names.length);
  }
});

test('each step names what it does, once, and takes SQL in at least one dialect', () => {
  assert.equal(new Set(MIGRATIONS.map((m) => m.name)).size, MIGRATIONS.length);
  for (const m of MIGRATIONS) assert.ok(m.sqlite !== null || m.postgres !== null, m.name);
});
