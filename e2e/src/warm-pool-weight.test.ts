import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { api, crunContainers, startServer, type TestServer } from './harness.js';

/**
 * The warm pool's sandboxes yield the CPU while they wait unclaimed: read from the real cgroup
 * files of a running daemon's sandboxes. Booted ahead for no one: cpu.weight 10 (cgroup v2), or
 * cpu.shares 102 on a v1 host (the same tenth of the default 1024); handed to a create: the
 * normal weight (100, or 1024 shares), set before the create answers.
 */

let server: TestServer;
const made: string[] = [];

before(async () => {
  server = await startServer({ templates: ['base'], env: { SANDBOXD_WARM_POOL_SIZE: '2', SANDBOXD_WARM_POOL_HORIZON_SECONDS: '0' } });
});

after(async () => {
  for (const id of made) await api(server, 'DELETE', `/v1/sandboxes/${id}`).catch(() => undefined);
  await server?.stop();
});

/** The CPU weight a sandbox's cgroup holds, on v2's scale (100 normal), and the raw file and value. */
function weightOf(id: string): { weight: number; file: string; raw: string } {
  const parent = server.env.SANDBOXD_CGROUP_PARENT;
  const v2 = existsSync('/sys/fs/cgroup/cgroup.controllers');
  const file = v2 ? `/sys/fs/cgroup/${parent}/${id}/cpu.weight` : `/sys/fs/cgroup/cpu/${parent}/${id}/cpu.shares`;
  const raw = readFileSync(file, 'utf8').trim();
  return { weight: v2 ? Number(raw) : Math.round((Number(raw) * 100) / 1024), file, raw };
}

async function until<T>(what: string, fn: () => T | undefined, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

test('a pool sandbox waiting unclaimed has the low CPU weight; a taken one, and one booted for a create, the normal weight', { timeout: 180_000 }, async () => {
  const create = async () => {
    const res = await api(server, 'POST', '/v1/sandboxes', { template_name: 'base', internet_access: false });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    made.push(res.body.id as string);
    return res.body.id as string;
  };
  // The first create finds nothing ready: its sandbox is booted for it, at the normal weight.
  const first = await create();
  assert.equal(weightOf(first).weight, 100, weightOf(first).file);
  // Then the pool boots its floor (2) ahead, for no one.
  const ready = await until('the pool to hold 2 ready sandboxes', () => {
    const ids = crunContainers(server.dataDir).filter((id) => !made.includes(id));
    return ids.length >= 2 ? ids : undefined;
  });
  for (const id of ready) {
    const w = weightOf(id);
    assert.equal(w.weight, 10, `${w.file} holds ${w.raw}`);
  }
  // A create takes one of them: the normal weight, set before it answered.
  const second = await create();
  assert.ok(ready.includes(second), 'served from the pool');
  const w = weightOf(second);
  assert.equal(w.weight, 100, `${w.file} holds ${w.raw}`);
  // The other still waits at the low weight.
  for (const id of ready.filter((x) => x !== second)) assert.equal(weightOf(id).weight, 10);
});
