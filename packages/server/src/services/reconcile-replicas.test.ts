// A control replica that starts (and reconciles) while another is in the middle of a verb on a
// sandbox: the container changed, the row not yet. Over the FakeRuntime and an in-memory store; the
// lock the two replicas share stands for the store's (services/replica-locks.test.ts tests that one
// across processes, on a real PostgreSQL).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { buildFakeApp } from '../testing/fake-app.js';
import { EventBus } from './events.js';
import { KeyedMutex } from './locks.js';
import { RouteTable } from '../gateway/routes.js';
import { SandboxService } from './sandboxes/index.js';

test("a replica's start-up reconcile during another replica's pause waits for it, and leaves the sandbox paused, row and container alike", async () => {
  const f = await buildFakeApp();
  try {
    const res = await f.call(f.orgs.a.key, 'POST', '/v1/sandboxes', { template_name: 'base' });
    assert.equal(res.status, 201, JSON.stringify(res.body));
    const id = res.body.id as string;
    const shared = new KeyedMutex();
    const s = f.services;
    const starting = new SandboxService({
      store: f.store,
      placement: f.placement,
      tokens: s.tokens,
      templates: s.templates,
      layerPath: (l) => l,
      gateway: { open: async () => null, close: async () => undefined, publicHost: (sid) => `http://${sid}.sandbox.test` },
      routes: new RouteTable(),
      events: new EventBus(),
      locks: shared,
      createLimiter: s.createLimiter,
      quotas: s.quotas,
      agentReadyTimeoutMs: 5000,
      tombstoneSeconds: 60,
      log: () => undefined,
      replicas: { shared: true, used: () => undefined, interrupted: () => undefined, changed: () => undefined },
    });
    // The other replica's pause, as transition() does it: the runtime first, then the row.
    let paused!: () => void;
    const containerPaused = new Promise<void>((r) => (paused = r));
    const otherPause = shared.run(id, async () => {
      const row = (await f.store.sandboxes.byId(id))!;
      await f.runtime.pause(id);
      paused();
      await new Promise((r) => setTimeout(r, 200));
      await f.store.sandboxes.update(id, row.version, { status: 'paused', updatedAt: new Date().toISOString() });
    });
    await containerPaused;
    // Reconcile reads the row (running) and the container (paused) now: without the lock it resumes it.
    const stats = await starting.reconcile();
    await otherPause;
    assert.equal((await f.store.sandboxes.byId(id))!.status, 'paused');
    assert.equal(await f.runtime.status(id), 'paused', 'the container is as its row says');
    assert.equal(stats.restored, 1);
  } finally {
    await f.close();
  }
});
