import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { TokenService } from './tokens.js';

const dir = mkdtempSync(join(tmpdir(), 'sbd-tokens-'));
after(() => rmSync(dir, { recursive: true, force: true }));
const tokens = new TokenService(join(dir, 'keys', 'jwt.pem'), 3600);

const rejects = (p: Promise<unknown>, code: string, message: RegExp) =>
  assert.rejects(p, (err: unknown) => err instanceof ServiceError && err.code === code && err.status === 401 && message.test(err.message));

test('an events token opens the events streams only, and a sandbox token only its sandbox', async () => {
  const events = await tokens.issueEvents('org_a', 'key_a', null, 300);
  const claims = await tokens.verifyEvents(events.token);
  assert.deepEqual([claims.orgId, claims.keyId, claims.sandboxId], ['org_a', 'key_a', null]);
  assert.ok(Math.abs(events.expiresAt.getTime() - Date.now() - 300_000) < 5000);
  const one = await tokens.verifyEvents((await tokens.issueEvents('org_a', 'key_a', 'sb1', 300)).token);
  assert.equal(one.sandboxId, 'sb1');

  const sandbox = await tokens.issue('sb1', 'org_a');
  await rejects(tokens.verifyEvents(sandbox.token), 'AUTHENTICATION_ERROR', /sandbox auth_token does not open the events streams/);
  await rejects(tokens.verify(events.token, 'sb1'), 'AUTHENTICATION_ERROR', /invalid token/);
  assert.equal((await tokens.verify(sandbox.token, 'sb1')).sandboxId, 'sb1');
});

test('an API key, garbage, a tampered, an unsigned or an expired token in ?token= is a 401 saying what to send', async () => {
  await rejects(tokens.verifyEvents('sbd_0123456789abcdef'), 'AUTHENTICATION_ERROR', /API keys are not accepted in the URL.*X-API-Key.*POST \/v1\/events\/token/);
  const { token } = await tokens.issueEvents('org_a', 'key_a', null, 300);
  const [h, p, sig] = token.split('.');
  const payload = JSON.parse(Buffer.from(p!, 'base64url').toString());
  const forged = Buffer.from(JSON.stringify({ ...payload, org: 'org_b' })).toString('base64url');
  await rejects(tokens.verifyEvents(`${h}.${forged}.${sig}`), 'AUTHENTICATION_ERROR', /invalid events token/);
  const none = Buffer.from(JSON.stringify({ alg: 'none', typ: 'sandboxd-events+jwt' })).toString('base64url');
  await rejects(tokens.verifyEvents(`${none}.${p}.`), 'AUTHENTICATION_ERROR', /invalid events token/);
  const expired = await tokens.issueEvents('org_a', 'key_a', null, 1);
  await new Promise((r) => setTimeout(r, 2100));
  await rejects(tokens.verifyEvents(expired.token), 'TOKEN_EXPIRED', /events token expired/);
});

test('the verified-token cache forgets a deleted sandbox and drops its oldest entry past the cap', async () => {
  const small = new TokenService(join(dir, 'keys', 'jwt.pem'), 3600, 3);
  const a1 = await small.issue('sa', 'org_a');
  const a2 = await small.issue('sa', 'org_a');
  const b = await small.issue('sb', 'org_a');
  for (const [t, id] of [[a1.token, 'sa'], [a2.token, 'sa'], [b.token, 'sb']] as const) await small.verify(t, id);
  assert.equal(small.cachedTokens(), 3);
  small.forget('sa');
  assert.equal(small.cachedTokens(), 1);
  // Forgotten tokens still verify (they are valid JWTs); they are only verified again.
  assert.equal((await small.verify(a1.token, 'sa')).sandboxId, 'sa');
  assert.equal(small.cachedTokens(), 2);
  const c = await small.issue('sc', 'org_a');
  const d = await small.issue('sd', 'org_a');
  await small.verify(c.token, 'sc');
  await small.verify(d.token, 'sd');
  assert.equal(small.cachedTokens(), 3, 'the cap holds: the oldest entry went');
  small.forget('sb');
  assert.equal(small.cachedTokens(), 3, 'sb was the oldest: already gone, nothing else removed');
  small.forget('sc');
  assert.equal(small.cachedTokens(), 2);
  small.forget('sd');
  small.forget('sa');
  assert.equal(small.cachedTokens(), 0);
});

test('a revoked key ends the sandbox tokens and preview links and sessions it made, cached or not; a token of another key, or of none, goes on', async () => {
  const t = new TokenService(join(dir, 'keys', 'jwt.pem'), 3600);
  const mine = await t.issue('sb1', 'org', 'key_aaaa000000000001');
  const cachedMine = await t.issue('sb1', 'org', 'key_aaaa000000000001');
  const other = await t.issue('sb1', 'org', 'key_bbbb000000000002');
  const legacy = await t.issue('sb1', 'org');
  const link = await t.issuePreview('link', 'sb1', 3000, true, 600, 'key_aaaa000000000001');
  const session = await t.issuePreview('session', 'sb1', 3000, true, 600, 'key_aaaa000000000001');
  assert.equal((await t.verify(cachedMine.token, 'sb1')).keyId, 'key_aaaa000000000001', 'verified (and cached) before the revocation');
  assert.equal((await t.verifyPreview(session.token, 'session', 'sb1', 3000)).keyId, 'key_aaaa000000000001');
  t.keysRevoked(['key_aaaa000000000001']);
  await rejects(t.verify(mine.token, 'sb1'), 'AUTHENTICATION_ERROR', /API key that made this token was revoked/);
  await rejects(t.verify(cachedMine.token, 'sb1'), 'AUTHENTICATION_ERROR', /was revoked/);
  await rejects(t.verifyPreview(link.token, 'link', 'sb1', 3000), 'AUTHENTICATION_ERROR', /preview link was revoked/);
  await rejects(t.verifyPreview(session.token, 'session', 'sb1', 3000), 'AUTHENTICATION_ERROR', /preview session was revoked/);
  assert.equal((await t.verify(other.token, 'sb1')).keyId, 'key_bbbb000000000002');
  assert.equal((await t.verify(legacy.token, 'sb1')).keyId, undefined, 'a token that names no key is checked by its expiry only');
});
