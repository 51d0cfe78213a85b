import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import type { EgressPolicy } from '../runtime/egress-policy.js';
import { ExportTooLarge } from '../runtime/types.js';
import { agentJson } from './agent-client.js';
import { withSandboxId } from '../runtime/sandbox-identity.js';
import type { Node, NodeSpec, Taken, TakeAsk } from './types.js';

/** What the suite needs of an implementation beyond the contract: specs it can boot, and hands inside. */
export interface NodeHarness {
  node: Node;
  /** A spec without identity this node can boot (its layers exist), with `over` applied. Its warm pool keeps one ready sandbox of a key once asked for it. */
  spec(over?: Partial<NodeSpec>): NodeSpec;
  /** From now on (true) boots fail part-way, after some of their work is done; again (false) they succeed. */
  failBoots(fail: boolean): void;
  /** Writes a file in running sandbox `id`, as a process inside would. */
  writeFile(id: string, path: string, content: string): Promise<void>;
  /** The file's content as running sandbox `id` sees it (undefined: none). */
  readFile(id: string, path: string): Promise<string | undefined>;
  /** The egress policy the node holds for sandbox `id` (undefined: the default). */
  egressOf(id: string): Promise<EgressPolicy | undefined>;
  /** Makes something in running sandbox `id` be killed for lack of memory (its memory limit is 128 MB). */
  oomKill(id: string): Promise<void>;
  /** Lets go of the node (its warm pool empties), removes every sandbox left, asserts no trace is left, and releases what setup made. */
  finish(): Promise<void>;
}

const code = (c: string) => (err: unknown) => err instanceof ServiceError && err.code === c;

/**
 * One suite every implementation of `Node` must pass: LocalNode on this machine (CrunRuntime as
 * root, and over the FakeRuntime), and RemoteNode over a real node API (plain and TLS). It holds
 * what the contract documents and the services rely on: a take hands over a running sandbox whose
 * agent holds the ask's env and whose network holds its policy, from the warm pool when one is
 * ready; the verbs keyed by id and idempotent; errors by code; nothing left by a failed take.
 */
export function nodeConformance(name: string, setup: () => Promise<NodeHarness>): void {
  describe(`${name}: node conformance`, { timeout: 180_000 }, () => {
    let h: NodeHarness;
    let node: Node;
    let seq = 0;

    before(async () => {
      h = await setup();
      node = h.node;
    });

    after(async () => {
      await h?.finish();
    });

    /** A spec of a warm key of its own (its env names it): no other take's ready sandbox serves it. */
    const own = (over: Partial<NodeSpec> = {}): NodeSpec => {
      const s = h.spec(over);
      return { ...s, env: { ...s.env, CONFORMANCE_KEY: String(++seq) } };
    };
    /** A take of a key of its own (so that no other test's ready sandbox serves it). */
    const take = (over: Partial<TakeAsk> = {}): Promise<Taken> => node.take({ spec: own(), poolId: `conf-${seq}`, label: 'conformance', env: {}, egress: null, ...over });

    const withTaken = async (taken: Taken[], fn: () => Promise<void>) => {
      try {
        await fn();
      } finally {
        for (const t of taken) await node.destroy(t.id);
      }
    };

    const agent = (id: string) => (timeoutMs: number) => node.dialAgent(id, timeoutMs);
    const envOf = async (id: string) => ((await agentJson(agent(id), 'GET', '/env', undefined, 5000)).body as { env_vars: Record<string, string> }).env_vars;
    const answers = async (id: string) => {
      const deadline = Date.now() + 10_000;
      for (;;) {
        const r = await agentJson(agent(id), 'GET', '/health', undefined, 5000).catch((err: unknown) => err);
        if ((r as { status?: number }).status === 200) return;
        if (Date.now() > deadline) assert.fail(`the agent of ${id} did not answer /health: ${String(r)}`);
        await sleep(20);
      }
    };
    const noAgent = (id: string, why: string) =>
      assert.rejects(node.dialAgent(id, 1000), (err: unknown) => (err instanceof ServiceError && err.code === 'AGENT_UNAVAILABLE') || ['ECONNREFUSED', 'ENOENT'].includes((err as NodeJS.ErrnoException).code ?? ''), why);

    test('take: a running sandbox of a new id, its agent answering with the ask\'s env; list() and statuses() know it', async () => {
      const t = await take({ env: { GREETING: 'hello', EMPTY: '' } });
      await withTaken([t], async () => {
        assert.match(t.id, /^[a-z0-9][a-z0-9-]{0,62}$/);
        assert.equal(t.warm, false, 'nothing was ready for a pool asked for the first time');
        assert.equal(await node.status(t.id), 'running');
        await answers(t.id);
        const env = await envOf(t.id);
        assert.equal(env.GREETING, 'hello');
        assert.equal(env.EMPTY, '');
        assert.ok((await node.list()).includes(t.id));
        assert.equal((await node.statuses([t.id])).get(t.id), 'running');
      });
    });

    test("take: the ask's egress policy is the sandbox's as it is handed over", async () => {
      const policy = { internet: true, allow: [], deny: ['203.0.113.0/24'] };
      const t = await take({ spec: own({ internetAccess: true }), egress: policy });
      await withTaken([t], async () => {
        assert.deepEqual(await h.egressOf(t.id), policy);
      });
    });

    test('the warm pool: once a key is asked for, the next take of it is served ready (warm), with its own env; after dropWarm none is ready', async () => {
      const spec = own();
      const poolId = `conf-warm-${seq}`;
      const ask = (env: Record<string, string>) => node.take({ spec, poolId, label: 'warm', env, egress: null });
      const taken = [await ask({})];
      await withTaken(taken, async () => {
        let next: Taken | undefined;
        // The gap between asks grows: a refill starts once the last ask is 100 ms old and the
        // node is quiet, and on a loaded host its boot may take longer than any fixed gap.
        for (let i = 0; i < 30 && !next?.warm; i++) {
          await sleep(Math.min(100 * 2 ** i, 2000));
          next = await ask({ N: String(i) });
          taken.push(next);
          if (!next.warm) await node.destroy(next.id);
        }
        assert.equal(next?.warm, true, 'a ready sandbox served a take');
        assert.equal((await envOf(next.id)).N, String(taken.length - 2), 'a ready one takes the env of the ask that got it');
        await node.dropWarm(poolId);
        await node.dropWarm(poolId);
        const after = await ask({});
        taken.push(after);
        assert.equal(after.warm, false, 'nothing was ready once the pool dropped the key');
      });
    });

    test('an abandoned take (its asker gone before it was handed over) leaves no sandbox of the asker', async () => {
      const ac = new AbortController();
      ac.abort();
      const before = new Set(await node.list());
      await assert.rejects(take({ signal: ac.signal }), code('INVALID_STATE'));
      for (const id of await node.list()) if (!before.has(id)) assert.notEqual(await node.status(id), 'stopped', 'nothing half-made');
    });

    test('a take whose boots fail leaves nothing behind; boots that work again serve the next take', async () => {
      const before = new Set(await node.list());
      h.failBoots(true);
      try {
        await assert.rejects(take({ spec: own({ internetAccess: true }) }));
      } finally {
        h.failBoots(false);
      }
      await sleep(200);
      for (const id of await node.list()) assert.ok(before.has(id) || (await node.status(id)) === 'running', `${id}: a failed boot left something`);
      const t = await take();
      await withTaken([t], () => answers(t.id));
    });

    test('pause and resume: the status follows; both idempotent; stop keeps the disk for start; destroy from any state, idempotent', async () => {
      const t = await take();
      await withTaken([t], async () => {
        const id = t.id;
        await h.writeFile(id, '/root/kept.txt', 'kept');
        await node.pause(id);
        await node.pause(id);
        assert.equal(await node.status(id), 'paused');
        await node.resume(id);
        await node.resume(id);
        assert.equal(await node.status(id), 'running');
        await node.stop(id);
        await node.stop(id);
        assert.equal(await node.status(id), 'stopped');
        await assert.rejects(node.pause(id), code('SANDBOX_STOPPED'));
        await noAgent(id, 'no agent while stopped');
        await node.start(withSandboxId(h.spec(), id));
        await node.start(withSandboxId(h.spec(), id));
        assert.equal(await node.status(id), 'running');
        await answers(id);
        assert.equal(await h.readFile(id, '/root/kept.txt'), 'kept');
        await node.destroy(id);
        await node.destroy(id);
        assert.equal(await node.status(id), 'missing');
        assert.ok(!(await node.list()).includes(id));
        await noAgent(id, 'no agent once destroyed');
      });
    });

    test("receive: the spec's id booted on a new, empty disk, its agent answering; received again, what the node held of it goes first; a failed boot leaves nothing", async () => {
      const id = `sbconfreceive${++seq}`;
      const spec = withSandboxId(own(), id);
      await withTaken([{ id, warm: false }], async () => {
        await node.receive(spec);
        assert.equal(await node.status(id), 'running');
        await answers(id);
        assert.ok((await node.list()).includes(id));
        await h.writeFile(id, '/root/first.txt', 'first');
        await node.stop(id);
        // A move cut short and tried again: the node's copy is replaced.
        await node.receive(spec);
        await answers(id);
        assert.equal(await h.readFile(id, '/root/first.txt'), undefined, 'a new empty disk');
        await node.stop(id);
        await node.start(spec);
        await answers(id);
        h.failBoots(true);
        try {
          // (With a network: a boot that fails at its last step, its container already running.)
          await assert.rejects(node.receive(withSandboxId(own({ internetAccess: true }), id)));
        } finally {
          h.failBoots(false);
        }
        assert.equal(await node.status(id), 'missing', 'nothing of the id is left');
      });
    });

    test('an unknown id: status missing, destroy resolves, listeningPorts empty, no agent, every other verb NOT_FOUND', async () => {
      const id = 'sbconformancenosuch';
      assert.equal(await node.status(id), 'missing');
      assert.deepEqual(Object.fromEntries(await node.statuses([id])), { [id]: 'missing' });
      await node.destroy(id);
      assert.deepEqual(await node.listeningPorts(id), []);
      await noAgent(id, 'no agent of an unknown id');
      for (const [verb, call] of [
        ['stop', () => node.stop(id)],
        ['pause', () => node.pause(id)],
        ['resume', () => node.resume(id)],
        ['start', () => node.start(withSandboxId(h.spec(), id))],
        ['stats', () => node.stats(id)],
        ['setEgress', () => node.setEgress(id, { internet: false, allow: [], deny: [] })],
        ['resetDisk', () => node.resetDisk(id, 1)],
      ] as const) {
        await assert.rejects(async () => call(), code('NOT_FOUND'), verb);
      }
    });

    test('a bad id is a broken contract of the caller: TypeError, before anything is done', async () => {
      for (const bad of ['Upper', '../escape', '']) await assert.rejects(async () => node.status(bad), TypeError, JSON.stringify(bad));
    });

    test("stats and listeningPorts: finite counters, the spec's memory limit; setEgress without a network is INVALID_STATE", async () => {
      const t = await take({ spec: own({ resources: { vcpu: 1, memoryMb: 128, diskGb: 1, pidsMax: 128 } }) });
      await withTaken([t], async () => {
        const s = await node.stats(t.id);
        assert.ok(Object.values(s).every((v) => typeof v === 'number' && Number.isFinite(v) && v >= 0), JSON.stringify(s));
        assert.equal(s.memoryLimitBytes, 128 * 1024 * 1024);
        assert.ok(Array.isArray(await node.listeningPorts(t.id)));
        await assert.rejects(node.setEgress(t.id, { internet: true, allow: [], deny: [] }), code('INVALID_STATE'));
      });
    });

    test("exportLayer: the sandbox's own files into a directory here; maxBytes refuses without copying; resetDisk gives a stopped one an empty disk", async () => {
      const t = await take();
      const dests: string[] = [];
      const dest = async () => {
        const d = await mkdtemp(join(tmpdir(), 'sbd-node-conf-'));
        dests.push(d);
        return d;
      };
      try {
        await withTaken([t], async () => {
          await h.writeFile(t.id, '/root/notes/saved.txt', 'saved\n');
          const live = await dest();
          await node.exportLayer(t.id, live);
          assert.equal(readFileSync(join(live, 'root/notes/saved.txt'), 'utf8'), 'saved\n');
          assert.equal(await node.status(t.id), 'running', 'thawed after the copy');
          await node.stop(t.id);
          const refused = await dest();
          await assert.rejects(node.exportLayer(t.id, refused, { maxBytes: 0 }), (err: unknown) => err instanceof ExportTooLarge);
          assert.deepEqual(readdirSync(refused), [], 'nothing copied');
          await node.resetDisk(t.id, 1);
          await node.start(withSandboxId(h.spec(), t.id));
          await answers(t.id);
          assert.equal(await h.readFile(t.id, '/root/notes/saved.txt'), undefined, 'a new empty disk');
        });
      } finally {
        for (const d of dests) await rm(d, { recursive: true, force: true });
      }
    });

    test('watchOom: kills are reported for their sandbox as they happen; the function returned stops the reports', async () => {
      const reports: Array<[string, number]> = [];
      const unwatch = node.watchOom((sid, kills) => reports.push([sid, kills]));
      const t = await take({ spec: own({ resources: { vcpu: 1, memoryMb: 128, diskGb: 1, pidsMax: 128 } }) });
      await withTaken([t], async () => {
        try {
          await sleep(300);
          await h.oomKill(t.id);
          for (let i = 0; i < 100 && reports.length === 0; i++) await sleep(50);
          assert.ok(reports.length > 0, 'reported within 5 s');
          assert.deepEqual([...new Set(reports.map(([sid]) => sid))], [t.id]);
        } finally {
          unwatch();
        }
      });
    });

    test('layerIds: a list of layer ids', async () => {
      const ids = await node.layerIds();
      assert.ok(Array.isArray(ids) && ids.every((id) => typeof id === 'string'));
    });
  });
}
