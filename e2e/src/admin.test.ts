import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { Admin, NotFoundError, PermissionDeniedError, Sandbox } from '@sandboxd/sdk';
import { agent, api, createSandbox, crunContainers, startServer, REPO_ROOT, type TestServer } from './harness.js';
import { sbx } from './sdk-support.js';

// Issue 14, item 4: organizations and API keys over HTTP for the operator's admin keys, used by the
// SDK and `sbx`; the host CLI goes on working without the service.

let server: TestServer;

function operator(args: string[]): any {
  return JSON.parse(execFileSync(process.execPath, [join(REPO_ROOT, 'packages/server/dist/cli.js'), ...args, '--json'], { env: server.env, encoding: 'utf8' }));
}

const as = (apiKey: string) => ({ baseUrl: server.baseUrl, apiKey });

before(async () => {
  server = await startServer({ templates: ['base'] });
});
after(async () => {
  await server?.stop();
});

describe('admin API', { timeout: 180_000 }, () => {
  test('the operator creates an organization and a key for it; the key works at once, sees its own organization only, and has no admin', async () => {
    const org = await api(server, 'POST', '/v1/admin/orgs', { name: 'acme' });
    assert.equal(org.status, 201, JSON.stringify(org.body));
    assert.equal(org.body.name, 'acme');
    assert.match(org.body.id, /^[0-9]+$/, 'organization ids are digits in answers');
    assert.equal((await api(server, 'GET', `/v1/admin/keys?org=${org.body.id}`)).status, 200, 'and name the organization');
    assert.equal((await api(server, 'POST', '/v1/admin/orgs', { name: 'acme' })).body.code, 'ALREADY_EXISTS');

    const created = await api(server, 'POST', '/v1/admin/keys', { org: 'acme', name: 'ci' });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    assert.match(created.body.secret, /^sbd_/);
    assert.deepEqual(created.body.scopes, ['sandboxes:read', 'sandboxes:write', 'templates:read', 'templates:write'], 'its organization only by default: no admin, no node-wide metrics');
    assert.deepEqual([created.body.org, created.body.org_id, created.body.name, created.body.revoked_at], ['acme', org.body.id, 'ci', null]);

    const tenant = as(created.body.secret);
    const limits = await api(tenant, 'GET', '/v1/account/limits');
    assert.equal(limits.status, 200);
    assert.equal(limits.body.organization_id, org.body.id);
    for (const [method, path, body] of [
      ['GET', '/v1/admin/orgs', undefined],
      ['POST', '/v1/admin/keys', { org: 'acme', scopes: ['admin'] }],
    ] as const) {
      const r = await api(tenant, method, path, body);
      assert.equal(r.status, 403, `${method} ${path}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.code, 'PERMISSION_DENIED');
    }

    // The listing never shows a secret or its hash.
    const list = await api(server, 'GET', '/v1/admin/keys?org=acme');
    assert.equal(list.status, 200);
    assert.deepEqual(
      list.body.data.map((k: any) => k.id),
      [created.body.id],
    );
    const text = JSON.stringify(list.body);
    assert.ok(!text.includes(created.body.secret) && !/"hash"|secret/.test(text), text);
    const all = await api(server, 'GET', '/v1/admin/keys');
    assert.ok(all.body.data.some((k: any) => k.org === 'default' && k.scopes.includes('admin')), 'the bootstrap key is listed');
  });

  test("admin on another organization's key stops at that organization", async () => {
    // What every key made without --scopes held before admin left the default.
    const other = operator(['keys', 'create', '--org', 'other', '--scopes', 'sandboxes:read,sandboxes:write,templates:read,templates:write,metrics:read,admin']);
    const key = as(other.api_key);
    assert.equal((await api(key, 'GET', '/v1/sandboxes')).status, 200, 'admin still stands for every scope in its organization');
    for (const path of ['/v1/admin/orgs', '/v1/admin/keys']) {
      const r = await api(key, 'GET', path);
      assert.equal(r.status, 403, JSON.stringify(r.body));
      assert.match(r.body.message, /operator's organization/);
    }
    const revoke = await api(key, 'DELETE', `/v1/admin/keys/${other.id}`);
    assert.equal(revoke.status, 403);
    // A key of the operator's organization without admin is refused too.
    const plain = operator(['keys', 'create', '--org', 'default', '--scopes', 'sandboxes:read']);
    const r = await api(as(plain.api_key), 'GET', '/v1/admin/orgs');
    assert.equal(r.status, 403);
    assert.match(r.body.message, /"admin" scope/);
  });

  test('revoking a key ends it at once; a key cannot revoke itself; bad input is a 4xx naming what is wrong', async () => {
    const made = await api(server, 'POST', '/v1/admin/keys', { org: 'acme', scopes: ['sandboxes:read'] });
    assert.equal((await api(as(made.body.secret), 'GET', '/v1/sandboxes')).status, 200);
    const revoked = await api(server, 'DELETE', `/v1/admin/keys/${made.body.id}`);
    assert.equal(revoked.status, 200, JSON.stringify(revoked.body));
    assert.match(revoked.body.revoked_at, /Z$/);
    assert.equal((await api(as(made.body.secret), 'GET', '/v1/sandboxes')).status, 401);
    // Revoking again answers the same key, still revoked at the first time.
    assert.equal((await api(server, 'DELETE', `/v1/admin/keys/${made.body.id}`)).body.revoked_at, revoked.body.revoked_at);

    const own = (await api(server, 'GET', '/v1/admin/keys?org=default')).body.data.find((k: any) => k.name === 'bootstrap');
    const self = await api(server, 'DELETE', `/v1/admin/keys/${own.id}`);
    assert.equal(self.status, 409);
    assert.equal(self.body.code, 'INVALID_STATE');
    // Another admin key cannot revoke the bootstrap key either: the daemon starts with it.
    const second = await api(server, 'POST', '/v1/admin/keys', { org: 'default', scopes: ['admin'], name: 'automation' });
    assert.equal(second.status, 201);
    const other = await api(as(second.body.secret), 'DELETE', `/v1/admin/keys/${own.id}`);
    assert.equal(other.status, 409, JSON.stringify(other.body));
    assert.match(other.body.message, /bootstrap key/);
    assert.equal((await api(server, 'GET', '/v1/account/limits')).status, 200, 'the bootstrap key still works');
    assert.equal((await api(server, 'DELETE', `/v1/admin/keys/${second.body.id}`)).status, 200);

    // A name cannot pass for an id; an id finds its organization.
    const acme = (await api(server, 'GET', '/v1/admin/orgs')).body.data.find((o: any) => o.name === 'acme');
    const shadow = await api(server, 'POST', '/v1/admin/orgs', { name: acme.id });
    assert.equal(shadow.status, 400, JSON.stringify(shadow.body));
    assert.equal((await api(server, 'POST', '/v1/admin/orgs', { name: 'ORG_x' })).status, 400);
    const byId = await api(server, 'POST', '/v1/admin/keys', { org: acme.id, scopes: ['sandboxes:read'] });
    assert.equal(byId.status, 201);
    assert.equal(byId.body.org, 'acme');

    const cases: Array<[string, string, unknown, number, string, RegExp]> = [
      ['POST', '/v1/admin/orgs', { name: '../etc' }, 400, 'VALIDATION_ERROR', /name/],
      ['POST', '/v1/admin/orgs', { name: 'x'.repeat(64) }, 400, 'VALIDATION_ERROR', /name/],
      ['POST', '/v1/admin/orgs', {}, 400, 'VALIDATION_ERROR', /name/],
      ['POST', '/v1/admin/keys', { org: 'acme', scopes: ['root'] }, 400, 'VALIDATION_ERROR', /scopes/],
      ['POST', '/v1/admin/keys', { org: 'acme', scopes: [] }, 400, 'VALIDATION_ERROR', /scopes/],
      ['POST', '/v1/admin/keys', { org: 'nope' }, 404, 'ORG_NOT_FOUND', /nope/],
      ['GET', '/v1/admin/keys?org=nope', undefined, 404, 'ORG_NOT_FOUND', /nope/],
      ['DELETE', '/v1/admin/keys/key_0000000000000000', undefined, 404, 'KEY_NOT_FOUND', /key_0000000000000000/],
      ['DELETE', '/v1/admin/keys/..%2f..%2fetc', undefined, 400, 'VALIDATION_ERROR', /id/],
    ];
    for (const [method, path, body, status, code, message] of cases) {
      const r = await api(server, method, path, body);
      assert.equal(r.status, status, `${method} ${path} ${JSON.stringify(body)}: ${JSON.stringify(r.body)}`);
      assert.equal(r.body.code, code, path);
      assert.match(r.body.message, message, path);
    }
    const anonymous = await api(as(''), 'GET', '/v1/admin/orgs');
    assert.equal(anonymous.status, 401);
  });

  test('the SDK and sbx drive it; the host CLI sees what they made', async () => {
    const opts = { baseUrl: server.baseUrl, apiKey: server.apiKey };
    const org = await Admin.createOrg('globex', opts);
    assert.equal(org.name, 'globex');
    assert.ok((await Admin.listOrgs(opts)).some((o) => o.id === org.id));
    const key = await Admin.createKey({ org: 'globex', scopes: ['sandboxes:read', 'sandboxes:write'], name: 'sdk' }, opts);
    assert.deepEqual([key.org, key.scopes, key.revokedAt], ['globex', ['sandboxes:read', 'sandboxes:write'], null]);
    assert.deepEqual((await Sandbox.listPage({ baseUrl: server.baseUrl, apiKey: key.secret })).data, [], 'the new key works, in its own empty organization');
    await assert.rejects(Admin.listOrgs({ baseUrl: server.baseUrl, apiKey: key.secret }), PermissionDeniedError);
    await assert.rejects(Admin.createKey({ org: 'initech' }, opts), NotFoundError);
    assert.match((await Admin.revokeKey(key.id, opts)).revokedAt ?? '', /Z$/);
    assert.ok(operator(['keys', 'list', '--org', 'globex']).some((k: any) => k.id === key.id && k.revokedAt));

    const created = await sbx(server, ['org', 'create', 'hooli']);
    assert.equal(created.code, 0, created.stderr);
    assert.match((await sbx(server, ['org', 'ls'])).stdout, /hooli/);
    const made = await sbx(server, ['key', 'create', '--org', 'hooli', '--scopes', 'templates:read', '--json']);
    assert.equal(made.code, 0, made.stderr);
    const k = JSON.parse(made.stdout) as { id: string; secret: string; scopes: string[] };
    assert.deepEqual(k.scopes, ['templates:read']);
    assert.match((await sbx(server, ['key', 'ls', '--org', 'hooli'])).stdout, new RegExp(`${k.id}.*templates:read.*active`));
    assert.equal((await sbx(server, ['key', 'revoke', k.id])).code, 0);
    assert.match((await sbx(server, ['key', 'ls', '--org', 'hooli'])).stdout, new RegExp(`${k.id}.*revoked`));
    const refused = await sbx({ baseUrl: server.baseUrl, apiKey: k.secret }, ['org', 'ls']);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /401|revoked|invalid/i);
    assert.equal((await sbx(server, ['key', 'create'])).code, 2, 'a missing --org is a usage error');
  });

  test('the admin operations are in the OpenAPI document, under their own tag', async () => {
    const doc = (await api(server, 'GET', '/openapi.json')).body;
    for (const [path, method] of [
      ['/v1/admin/orgs', 'get'],
      ['/v1/admin/orgs', 'post'],
      ['/v1/admin/keys', 'get'],
      ['/v1/admin/keys', 'post'],
      ['/v1/admin/keys/{id}', 'delete'],
    ]) {
      const op = doc.paths[path]?.[method];
      assert.ok(op, `${method} ${path}`);
      assert.deepEqual(op.tags, ['admin']);
      assert.ok(op.summary, `${method} ${path} has a summary`);
    }
    assert.ok(doc.components.schemas.Error.properties.code.enum.includes('ORG_NOT_FOUND'));
  });
});

// Issue 28, item 6: an organization can be deleted, with everything it made.
describe('deleting an organization', { timeout: 240_000 }, () => {
  test("its keys, sandboxes and snapshots go with it, another organization's stay; default, the caller's own and unknown ones are refused", async () => {
    await api(server, 'POST', '/v1/admin/orgs', { name: 'doomed' });
    const doomedKey = (await api(server, 'POST', '/v1/admin/keys', { org: 'doomed', name: 'k' })).body.secret as string;
    await api(server, 'POST', '/v1/admin/orgs', { name: 'staying' });
    const stayingKey = (await api(server, 'POST', '/v1/admin/keys', { org: 'staying', name: 'k' })).body.secret as string;
    const doomed = as(doomedKey);
    const running = await createSandbox(doomed);
    const paused = await createSandbox(doomed);
    assert.equal((await api(doomed, 'POST', `/v1/sandboxes/${paused.id}/pause`)).status, 200);
    const snap = await api(doomed, 'POST', `/v1/sandboxes/${running.id}/snapshots`, { name: 'kept' });
    assert.equal(snap.status, 201, JSON.stringify(snap.body));
    const other = await createSandbox(as(stayingKey));

    assert.equal((await api(server, 'DELETE', '/v1/admin/orgs/default')).body.code, 'INVALID_STATE', "the operator's organization stays");
    assert.equal((await api(server, 'DELETE', '/v1/admin/orgs/nosuch')).status, 404);
    assert.equal((await api(doomed, 'DELETE', '/v1/admin/orgs/doomed')).status, 403, 'the admin API is the operator’s');

    // The host's command asks the running service (its sandboxes are the service's to delete).
    const r = operator(['orgs', 'delete', 'doomed']);
    assert.equal(r.status, 'deleted');
    assert.deepEqual(r.deleted, { keys: 1, sandboxes: 2, snapshots: 1, templates: 0, uploads: 0 });
    assert.equal((await api(doomed, 'GET', '/v1/sandboxes')).status, 401, 'its key is gone');
    // Its URL is closed (port mode: a refused connection) or answers an error; never the agent.
    const gone = await agent(running, 'POST', '/commands/run', { command: 'true' }).then((x) => x.status, () => 'refused');
    assert.ok(gone === 'refused' || (typeof gone === 'number' && gone >= 400), `its sandbox answers no more: ${gone}`);
    const orgs = await api(server, 'GET', '/v1/admin/orgs');
    assert.ok(!orgs.body.data.some((o: { name: string }) => o.name === 'doomed'));
    assert.equal((await api(server, 'DELETE', '/v1/admin/orgs/doomed')).status, 404, 'asked again: there is no such organization');
    for (let i = 0; ; i++) {
      const left = crunContainers(server.dataDir).filter((c) => c === running.id || c === paused.id);
      if (left.length === 0) break;
      assert.ok(i < 100, `its containers are removed from the host: ${left.join(', ')}`);
      await new Promise((res) => setTimeout(res, 100));
    }
    const still = await agent(other, 'POST', '/commands/run', { command: 'echo', args: ['here'] });
    assert.equal(still.status, 200, "another organization's sandbox runs on");
    assert.equal(still.body.stdout.trim(), 'here');
  });
});

// Issue 28, item 2: revoking a key revokes what it made.
describe('revoking a key', { timeout: 240_000 }, () => {
  test('ends the sandbox tokens and preview links it made at once (here) or within seconds (revoked on the host); a token another key made goes on', async () => {
    await api(server, 'POST', '/v1/admin/orgs', { name: 'revoker' });
    const mk = async () => (await api(server, 'POST', '/v1/admin/keys', { org: 'revoker', name: 'k' })).body as { id: string; secret: string };
    const [first, second, third] = [await mk(), await mk(), await mk()];
    const sb = await createSandbox(as(first.secret));
    const ok = async (token: string) => (await agent({ publicHost: sb.publicHost, authToken: token }, 'POST', '/commands/run', { command: 'true' })).status;
    assert.equal(await ok(sb.authToken), 200);
    const preview = await api(as(first.secret), 'GET', `/v1/sandboxes/${sb.id}/ports/3000`);
    assert.equal(preview.status, 200, JSON.stringify(preview.body));
    const byThird = await api(as(third.secret), 'POST', `/v1/sandboxes/${sb.id}/token/refresh`);
    assert.equal(byThird.status, 200, JSON.stringify(byThird.body));
    const bySecond = await api(as(second.secret), 'POST', `/v1/sandboxes/${sb.id}/token/refresh`);

    assert.equal((await api(server, 'DELETE', `/v1/admin/keys/${first.id}`)).status, 200);
    assert.equal(await ok(sb.authToken), 401, 'the auth_token of the create is refused at once');
    const link = await fetch(preview.body.signed_url, { redirect: 'manual' });
    assert.equal(link.status, 401, "the preview link it asked for is refused");
    assert.equal(await ok(byThird.body.auth_token), 200, 'a token another key made still opens the sandbox');

    // Revoked on the host: the daemon reads it from the store within its interval.
    operator(['keys', 'revoke', second.id]);
    const started = Date.now();
    while ((await ok(bySecond.body.auth_token)) === 200) {
      assert.ok(Date.now() - started < 10_000, 'refused within seconds of a revocation on the host');
      await new Promise((res) => setTimeout(res, 100));
    }
    assert.equal(await ok(bySecond.body.auth_token), 401);
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
  });
});
