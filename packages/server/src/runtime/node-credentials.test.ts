// A node's registry credential: signed by control's key, it names the node and carries an end (30
// days unless told); an expired one is refused saying so and how to make another, one of before
// credentials expired (no exp) still passes, and nothing but control's own signature is one.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SignJWT } from 'jose';
import { ServiceError } from '@sandboxd/protocol';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { NODE_CREDENTIAL_DAYS, readNodeCredential, signingKeyFromPem } from './cluster-auth.js';

const keys = testClusterKeys();
const DAY = 86_400;
const nowS = () => Math.floor(Date.now() / 1000);

const refused = (token: string | undefined, why: RegExp, what?: string) =>
  assert.rejects(keys.signer.checkNodeCredential(token), (err: unknown) => err instanceof ServiceError && err.code === 'AUTHENTICATION_ERROR' && why.test(err.message), what);

test('a credential names its node and ends 30 days on, or as long as asked', async () => {
  const token = await keys.signer.nodeCredentialFor('node-a');
  const claims = await keys.signer.checkNodeCredential(token);
  assert.equal(claims.nodeId, 'node-a');
  assert.ok(Math.abs(claims.issuedAt - nowS()) <= 1);
  assert.equal(claims.expiresAt! - claims.issuedAt, NODE_CREDENTIAL_DAYS * DAY);
  assert.deepEqual(readNodeCredential(token), claims, 'what the node reads of it, unchecked, is what control checks');
  const week = await keys.signer.checkNodeCredential(await keys.signer.nodeCredentialFor('node-a', { lifetimeSeconds: 7 * DAY }));
  assert.equal(week.expiresAt! - week.issuedAt, 7 * DAY);
  for (const lifetimeSeconds of [0, -1, 1.5, 366 * DAY, Number.NaN]) {
    await assert.rejects(keys.signer.nodeCredentialFor('node-a', { lifetimeSeconds }), TypeError, String(lifetimeSeconds));
  }
  assert.equal(readNodeCredential('not.a.jwt'), undefined);
});

test('an expired credential is refused, saying when it expired and how to make a new one', async () => {
  // Made 31 days ago for 30 days: expired a day ago.
  const old = await keys.signer.nodeCredentialFor('node-a', { now: Date.now() - 31 * DAY * 1000 });
  const expiredAt = new Date((readNodeCredential(old)!.expiresAt!) * 1000).toISOString();
  await refused(old, new RegExp(`node node-a's registry credential expired at ${expiredAt.replace(/\./g, '\\.')}.*sandboxd cluster node-credential node-a --out FILE`));
  // Within the clocks' tolerance of its end it still passes; past it, not.
  await keys.signer.checkNodeCredential(await keys.signer.nodeCredentialFor('node-a', { lifetimeSeconds: 60, now: Date.now() - 62_000 }));
  await refused(await keys.signer.nodeCredentialFor('node-a', { lifetimeSeconds: 60, now: Date.now() - 70_000 }), /expired at/);
});

test('a credential made before credentials expired (no exp) still passes, with no end', async () => {
  const legacy = await new SignJWT({})
    .setProtectedHeader({ alg: 'EdDSA', typ: 'sandboxd-node-credential+jwt' })
    .setIssuer('sandboxd-control')
    .setSubject('node-a')
    .setAudience('sandboxd-control:registry')
    .setIssuedAt(nowS() - 400 * DAY)
    .sign(signingKeyFromPem(keys.signingPem));
  const claims = await keys.signer.checkNodeCredential(legacy);
  assert.deepEqual([claims.nodeId, claims.expiresAt], ['node-a', undefined]);
  assert.equal(readNodeCredential(legacy)?.expiresAt, undefined);
});

test('a credential altered or signed by anyone else is refused, without saying why', async () => {
  const token = await keys.signer.nodeCredentialFor('node-a');
  const [h, p, sig] = token.split('.') as [string, string, string];
  const payload = JSON.parse(Buffer.from(p, 'base64url').toString()) as Record<string, unknown>;
  const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const tampered: Array<[string, string]> = [
    ['its end pushed a year on', `${h}.${b64({ ...payload, exp: (payload.exp as number) + 365 * DAY })}.${sig}`],
    ['its end taken out', `${h}.${b64({ ...payload, exp: undefined })}.${sig}`],
    ['another node named', `${h}.${b64({ ...payload, sub: 'node-b' })}.${sig}`],
    ['its signature cut', token.slice(0, -4)],
    ["another cluster's", await testClusterKeys().signer.nodeCredentialFor('node-a')],
    // An expired credential of another cluster is not told apart from any other that is not ours.
    ["another cluster's, expired", await testClusterKeys().signer.nodeCredentialFor('node-a', { now: Date.now() - 40 * DAY * 1000 })],
  ];
  for (const [what, t] of tampered) await refused(t, /^the registry is for the cluster's nodes: the credential is not valid$/, what);
  await refused(undefined, /no credential/);
});
