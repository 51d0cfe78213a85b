import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { AuthenticationError, NotFoundError, Sandbox } from 'e2b';
import { api, startServer, type TestServer } from './harness.js';

// E2B's control plane (/e2b) driven by the unmodified `e2b` client (pinned in e2e/package.json) on
// a real daemon and real sandboxes: create, list with a metadata filter, getInfo, setTimeout,
// pause and connect, kill, and its typed errors. Commands and files (the data plane) are
// e2b-*.test.ts's of the gateway and the agent.

let server: TestServer;
let e2bKey: string;
const made: string[] = [];

before(async () => {
  server = await startServer({ env: { SANDBOXD_REGISTRY_URL: 'none' }, templates: ['base'] });
  // A built-in template not in the layer cache yet is built behind the running daemon.
  for (const deadline = Date.now() + 15 * 60_000; ; await new Promise((r) => setTimeout(r, 2000))) {
    const t = await api(server, 'GET', '/v1/templates/base');
    if (t.body?.status === 'active') break;
    assert.ok(Date.now() < deadline && t.body?.status !== 'failed', `template base: ${JSON.stringify(t.body)}`);
  }
  // A key in E2B's shape (`e2b_` and hex) for the same organization: E2B's clients accept it as is.
  const key = await api(server, 'POST', '/v1/admin/keys', { org: 'default', name: 'e2b', format: 'e2b' });
  assert.equal(key.status, 201, JSON.stringify(key.body));
  e2bKey = key.body.secret;
  assert.match(e2bKey, /^e2b_[0-9a-f]{40}$/);
  // What a user sets: the client keeps the path of E2B_API_URL.
  process.env.E2B_API_URL = `${server.baseUrl}/e2b`;
  process.env.E2B_API_KEY = e2bKey;
  // Nothing here may reach E2B's own hosts: a client that ignored E2B_API_URL would fail, not leak.
  process.env.E2B_DOMAIN = 'invalid';
});
after(async () => {
  for (const id of made) await api(server, 'DELETE', `/v1/sandboxes/${id}`).catch(() => undefined);
  await server?.stop();
});

/** The sandbox's agent, through our gateway, with a token. */
async function agentEnv(id: string, token: string): Promise<Record<string, string>> {
  const host = (await api(server, 'GET', `/v1/sandboxes/${id}`)).body.public_host as string;
  const res = await fetch(`${host}/env`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(30_000) });
  assert.equal(res.status, 200, await res.clone().text());
  return ((await res.json()) as { env_vars: Record<string, string> }).env_vars;
}

test('Sandbox.create with metadata, envs and a timeout; list by metadata; getInfo; setTimeout', async () => {
  const tag = `e2e-${Date.now()}`;
  const sbx = await Sandbox.create('base', { metadata: { tag, role: 'first' }, envs: { GREETING: 'from e2b' }, timeoutMs: 120_000 });
  made.push(sbx.sandboxId);
  const other = await Sandbox.create('base', { metadata: { tag, role: 'second' } });
  made.push(other.sandboxId);
  await Sandbox.create('base', { metadata: { tag: `${tag}-not` } }).then((s) => made.push(s.sandboxId));

  // Our sandbox, as our own API sees it.
  const ours = await api(server, 'GET', `/v1/sandboxes/${sbx.sandboxId}`);
  assert.equal(ours.status, 200);
  assert.equal(ours.body.template_name, 'base');
  assert.equal(ours.body.timeout_seconds, 120);
  assert.deepEqual(ours.body.metadata, { tag, role: 'first' });
  // The client's access token is a token of this sandbox: the gateway takes it, and the env vars are the agent's.
  const token = (sbx as unknown as { envdAccessToken: string }).envdAccessToken;
  assert.equal(typeof token, 'string');
  assert.equal((await agentEnv(sbx.sandboxId, token)).GREETING, 'from e2b');

  const listed = await Sandbox.list({ query: { metadata: { tag } } }).nextItems();
  assert.deepEqual(listed.map((s) => s.sandboxId).sort(), [sbx.sandboxId, other.sandboxId].sort());
  const first = listed.find((s) => s.sandboxId === sbx.sandboxId)!;
  assert.deepEqual(first.metadata, { tag, role: 'first' });
  assert.equal(first.state, 'running');
  const byRole = await Sandbox.list({ query: { metadata: { tag, role: 'second' } } }).nextItems();
  assert.deepEqual(byRole.map((s) => s.sandboxId), [other.sandboxId]);
  // Pages of one: the paginator follows x-next-token to the end.
  const paginator = Sandbox.list({ query: { metadata: { tag } }, limit: 1 });
  const paged: string[] = [];
  while (paginator.hasNext && paged.length < 5) paged.push(...(await paginator.nextItems()).map((s) => s.sandboxId));
  assert.deepEqual(paged.sort(), [sbx.sandboxId, other.sandboxId].sort());

  const info = await sbx.getInfo();
  assert.equal(info.sandboxId, sbx.sandboxId);
  assert.equal(info.templateId, ours.body.template_id);
  assert.equal(info.state, 'running');
  assert.deepEqual(info.metadata, { tag, role: 'first' });
  assert.ok(info.cpuCount > 0 && info.memoryMB > 0);
  assert.ok(Math.abs(info.endAt.getTime() - Date.now() - 120_000) < 30_000, `endAt ${info.endAt.toISOString()}`);

  await sbx.setTimeout(600_000);
  const later = await Sandbox.getInfo(sbx.sandboxId);
  assert.ok(Math.abs(later.endAt.getTime() - Date.now() - 600_000) < 30_000, `endAt ${later.endAt.toISOString()}`);
  assert.equal((await api(server, 'GET', `/v1/sandboxes/${sbx.sandboxId}`)).body.timeout_seconds, 600);

  // A fork: a running copy with its own id and its own kept token, the source's env with it.
  const forks = await sbx.fork();
  assert.equal(forks.length, 1);
  const fork = forks[0];
  assert.ok(fork instanceof Sandbox, String(fork));
  made.push(fork.sandboxId);
  assert.notEqual(fork.sandboxId, sbx.sandboxId);
  const forkToken = (fork as unknown as { envdAccessToken: string }).envdAccessToken;
  assert.notEqual(forkToken, token);
  assert.equal((await agentEnv(fork.sandboxId, forkToken)).GREETING, 'from e2b');
  assert.equal(await fork.kill(), true);

  const metrics = await sbx.getMetrics();
  assert.equal(metrics.length, 1);
  assert.ok(metrics[0]!.memUsed > 0 && metrics[0]!.memTotal > 0, JSON.stringify(metrics));
});

test('pause, then connect resumes it with the same access token; kill; NotFoundError after', async () => {
  const sbx = await Sandbox.create('base', { timeoutMs: 300_000 });
  made.push(sbx.sandboxId);
  assert.equal(await sbx.pause(), true);
  assert.equal((await api(server, 'GET', `/v1/sandboxes/${sbx.sandboxId}`)).body.status, 'paused');
  assert.equal((await Sandbox.getInfo(sbx.sandboxId)).state, 'paused');
  assert.equal(await sbx.pause(), false, 'already paused');
  const paused = await Sandbox.list({ query: { state: ['paused'] } }).nextItems();
  assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId));

  const again = await Sandbox.connect(sbx.sandboxId);
  assert.equal((await api(server, 'GET', `/v1/sandboxes/${sbx.sandboxId}`)).body.status, 'running');
  const token = (again as unknown as { envdAccessToken: string }).envdAccessToken;
  assert.equal(token, (sbx as unknown as { envdAccessToken: string }).envdAccessToken, 'one token per sandbox');
  assert.ok(await agentEnv(sbx.sandboxId, token));

  assert.equal(await again.kill(), true);
  assert.equal((await api(server, 'GET', `/v1/sandboxes/${sbx.sandboxId}`)).status, 404);
  assert.equal(await Sandbox.kill(sbx.sandboxId), false, 'a killed sandbox: false');
  await assert.rejects(Sandbox.getInfo(sbx.sandboxId), NotFoundError);
  await assert.rejects(Sandbox.connect(sbx.sandboxId), NotFoundError);
  await assert.rejects(Sandbox.setTimeout(sbx.sandboxId, 60_000), NotFoundError);
});

test('AuthenticationError on a bad key; our own sbd_ keys work too; another organization sees nothing', async () => {
  await assert.rejects(Sandbox.list({ apiKey: 'e2b_0123456789abcdef0123456789abcdef01234567' }).nextItems(), AuthenticationError);
  await assert.rejects(Sandbox.create('base', { apiKey: 'e2b_0123456789abcdef0123456789abcdef01234567' }), AuthenticationError);

  const mine = await Sandbox.create('base', { apiKey: server.apiKey, metadata: { who: 'operator' } });
  made.push(mine.sandboxId);
  assert.equal((await Sandbox.getInfo(mine.sandboxId, { apiKey: server.apiKey })).metadata.who, 'operator');

  const org = await api(server, 'POST', '/v1/admin/orgs', { name: 'e2b-other' });
  assert.equal(org.status, 201, JSON.stringify(org.body));
  const theirs = (await api(server, 'POST', '/v1/admin/keys', { org: 'e2b-other', format: 'e2b' })).body.secret as string;
  await assert.rejects(Sandbox.getInfo(mine.sandboxId, { apiKey: theirs }), NotFoundError);
  await assert.rejects(Sandbox.connect(mine.sandboxId, { apiKey: theirs }), NotFoundError);
  assert.equal(await Sandbox.kill(mine.sandboxId, { apiKey: theirs }), false);
  await assert.rejects(Sandbox.fork(mine.sandboxId, { apiKey: theirs }), NotFoundError);
  await assert.rejects(Sandbox.setTimeout(mine.sandboxId, 60_000, { apiKey: theirs }), NotFoundError);
  assert.deepEqual(await Sandbox.list({ apiKey: theirs }).nextItems(), []);
  assert.equal((await api(server, 'GET', `/v1/sandboxes/${mine.sandboxId}`)).body.status, 'running', 'untouched');
});
