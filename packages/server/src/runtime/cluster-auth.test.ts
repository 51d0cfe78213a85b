import assert from 'node:assert/strict';
import { createHmac, createPublicKey, generateKeyPairSync, sign as cryptoSign } from 'node:crypto';
import { test } from 'node:test';
import { SignJWT } from 'jose';
import { ServiceError } from '@sandboxd/protocol';
import { testClusterKeys } from '../testing/cluster-keys.js';
import { ClusterSigner, ClusterVerifier, NODE_TOKEN_TTL_SECONDS, signingKeyFromPem, verifyKeyFromPem } from './cluster-auth.js';

const keys = testClusterKeys();
const privateKey = signingKeyFromPem(keys.signingPem);
const now = () => Math.floor(Date.now() / 1000);
const b64 = (v: object | Buffer) => (Buffer.isBuffer(v) ? v : Buffer.from(JSON.stringify(v))).toString('base64url');

const refused = (token: string | undefined, nodeId = 'node-a', why = /not valid for this node|no token/) =>
  assert.rejects(keys.verifier.verify(token, nodeId), (err: unknown) => err instanceof ServiceError && err.code === 'AUTHENTICATION_ERROR' && why.test(err.message));

/** A token with the claims `over` sets, signed with the cluster's own private key (EdDSA). */
const signed = (over: (j: SignJWT) => SignJWT, key = privateKey) => over(new SignJWT({}).setProtectedHeader({ alg: 'EdDSA', typ: 'JWT' })).sign(key);
const good = (j: SignJWT) => j.setIssuer('sandboxd-control').setAudience('sandboxd-node:node-a').setIssuedAt().setExpirationTime('60s');
const claims = () => ({ iss: 'sandboxd-control', aud: 'sandboxd-node:node-a', iat: now(), exp: now() + 60 });

/** An HS256 token whose HMAC key is `secret`: what an attacker who has only the public key can make. */
const hs256 = (secret: Buffer | string) => {
  const input = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64(claims())}`;
  return `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`;
};

test("control's tokens pass, for the node they name only; they are cached and renewed", async () => {
  const token = await keys.signer.tokenFor('node-a');
  await keys.verifier.verify(token, 'node-a');
  assert.equal(await keys.signer.tokenFor('node-a'), token, 'the same token while half its life is left');
  assert.equal(JSON.parse(Buffer.from(token.split('.')[0]!, 'base64url').toString()).alg, 'EdDSA');
  const payload = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as Record<string, number>;
  assert.equal(payload.exp! - payload.iat!, NODE_TOKEN_TTL_SECONDS);
  await refused(token, 'node-b');
  await refused(undefined);
  await refused('');
  await refused('not-a-jwt');
  // A verifier made from the PEM or from the KeyObject is the same verifier.
  await new ClusterVerifier(verifyKeyFromPem(keys.verifyPem)).verify(token, 'node-a');
});

test('a token signed by another key pair is refused', async () => {
  const other = testClusterKeys();
  await refused(await other.signer.tokenFor('node-a'));
  await refused(await signed(good, signingKeyFromPem(other.signingPem)));
  // And ours is refused by the other cluster's nodes.
  await assert.rejects(other.verifier.verify(await keys.signer.tokenFor('node-a'), 'node-a'), /not valid for this node/);
});

test('algorithm confusion: an HS256 token with the public key as the HMAC secret is refused', async () => {
  const spkiDer = createPublicKey(keys.verifyPem).export({ type: 'spki', format: 'der' });
  const raw = Buffer.from(createPublicKey(keys.verifyPem).export({ format: 'jwk' }).x!, 'base64url');
  for (const [what, secret] of [
    ['the PEM bytes', keys.verifyPem],
    ['the PEM without its last newline', keys.verifyPem.trimEnd()],
    ['the SPKI DER', spkiDer],
    ['the raw 32 bytes', raw],
  ] as const) {
    await assert.rejects(keys.verifier.verify(hs256(secret), 'node-a'), /not valid for this node/, what);
  }
  // jose's own HS256 with the PEM as the key: the same refusal.
  const josed = await new SignJWT(claims()).setProtectedHeader({ alg: 'HS256' }).sign(new TextEncoder().encode(keys.verifyPem));
  await refused(josed);
});

test('alg none, other algorithms and tampering are refused', async () => {
  const body = b64(claims());
  await refused(`${b64({ alg: 'none', typ: 'JWT' })}.${body}.`);
  await refused(`${b64({ alg: 'none' })}.${body}.${b64(Buffer.from('x'))}`);
  await refused(`${b64({ alg: 'EdDSA', typ: 'JWT' })}.${body}.`, 'node-a');
  // An ES256 token of an attacker's own P-256 key.
  const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  await refused(await new SignJWT(claims()).setProtectedHeader({ alg: 'ES256' }).sign(ec.privateKey));
  // A good token with its audience swapped, and the signature kept.
  const [h, , sig] = (await keys.signer.tokenFor('node-a')).split('.');
  await refused(`${h}.${b64({ ...claims(), aud: 'sandboxd-node:node-b' })}.${sig}`, 'node-b');
  await refused(`${h}.${b64({ ...claims(), exp: now() + 3600 })}.${sig}`);
});

test('the claims: issuer, audience, expiry, iat, and the lifetime the node enforces', async () => {
  await keys.verifier.verify(await signed(good), 'node-a');
  const expired = await signed((j) => good(j).setIssuedAt(now() - 600).setExpirationTime(now() - 300));
  await assert.rejects(keys.verifier.verify(expired, 'node-a'), (err: unknown) => err instanceof ServiceError && err.code === 'AUTHENTICATION_ERROR' && /expired/.test(err.message));
  for (const [what, token] of [
    ['wrong audience', await signed((j) => good(j).setAudience('sandboxd-node:node-b'))],
    ['an audience list without ours', await signed((j) => good(j).setAudience(['sandboxd-node:node-x', 'sandboxd-node:']))],
    ['no audience', await signed((j) => j.setIssuer('sandboxd-control').setIssuedAt().setExpirationTime('60s'))],
    ['wrong issuer', await signed((j) => good(j).setIssuer('sandboxd-node'))],
    ['missing exp', await signed((j) => j.setIssuer('sandboxd-control').setAudience('sandboxd-node:node-a').setIssuedAt())],
    ['missing iat, long exp', await signed((j) => j.setIssuer('sandboxd-control').setAudience('sandboxd-node:node-a').setExpirationTime('365d'))],
    ['iat in the future', await signed((j) => good(j).setIssuedAt(now() + 3600).setExpirationTime(now() + 3660))],
    ['older than the lifetime, whatever its exp says', await signed((j) => good(j).setIssuedAt(now() - 120).setExpirationTime('365d'))],
  ] as const) {
    await assert.rejects(keys.verifier.verify(token, 'node-a'), (err: unknown) => err instanceof ServiceError && err.code === 'AUTHENTICATION_ERROR', what);
  }
  // Clock skew within the tolerance passes.
  await keys.verifier.verify(await signed((j) => good(j).setIssuedAt(now() + 3)), 'node-a');
});

test('a token checked once is taken on its signature again, but never past its time: its exp, or its lifetime from iat, with the tolerance', async () => {
  let clock = Date.now();
  const verifier = new ClusterVerifier(keys.verifyPem, { now: () => clock });
  const start = clock;
  const token = await signed(good);
  await verifier.verify(token, 'node-a');
  clock = start + 30_000;
  await verifier.verify(token, 'node-a');
  assert.equal(verifier.signatureChecks, 1, 'the second time, taken on the first check');
  await assert.rejects(verifier.verify(token, 'node-b'), /not valid for this node/, 'checked for node-a: not for node-b');
  clock = start + (NODE_TOKEN_TTL_SECONDS + 3) * 1000;
  await verifier.verify(token, 'node-a');
  clock = start + (NODE_TOKEN_TTL_SECONDS + 7) * 1000;
  await assert.rejects(verifier.verify(token, 'node-a'), /expired/, 'past its exp and the tolerance: refused though it passed before');
  await assert.rejects(verifier.verify(token, 'node-a'), /expired/, 'and again');
  assert.ok(verifier.signatureChecks >= 4, 'past its time, checked again in full each time');
  // An exp sooner than the lifetime ends it sooner.
  clock = start;
  const short = await signed((j) => good(j).setExpirationTime(Math.floor(start / 1000) + 10));
  await verifier.verify(short, 'node-a');
  clock = start + 12_000;
  await verifier.verify(short, 'node-a');
  clock = start + 17_000;
  await assert.rejects(verifier.verify(short, 'node-a'), /expired/);
  // A long exp does not stretch the lifetime from iat.
  clock = start;
  const long = await signed((j) => good(j).setExpirationTime('365d'));
  await verifier.verify(long, 'node-a');
  clock = start + (NODE_TOKEN_TTL_SECONDS + 7) * 1000;
  await assert.rejects(verifier.verify(long, 'node-a'), (err: unknown) => err instanceof ServiceError && err.code === 'AUTHENTICATION_ERROR');
});

test('a node cannot mint a token: its verifier has no signing, and no private key can be given to it', async () => {
  assert.deepEqual(Object.getOwnPropertyNames(ClusterVerifier.prototype).sort(), ['constructor', 'signatureChecks', 'verify']);
  assert.deepEqual(Object.keys(keys.verifier), [], 'no field to read a key from');
  assert.equal(JSON.stringify(keys.verifier), '{}');
  assert.equal((keys.verifier as unknown as { tokenFor?: unknown }).tokenFor, undefined);
  // A private key is refused, not reduced to its public half.
  assert.throws(() => new ClusterVerifier(keys.signingPem), /a node needs the public key only/);
  assert.throws(() => new ClusterVerifier(privateKey), TypeError);
  assert.throws(() => verifyKeyFromPem(keys.signingPem), /private key: a node needs the public key only/);
  // What the node has cannot sign, with jose or with node:crypto.
  const nodeKey = verifyKeyFromPem(keys.verifyPem);
  assert.equal(nodeKey.type, 'public');
  await assert.rejects(new SignJWT(claims()).setProtectedHeader({ alg: 'EdDSA' }).sign(nodeKey));
  assert.throws(() => cryptoSign(null, Buffer.from('x'), nodeKey));
  // And the signer takes only the private key.
  assert.throws(() => new ClusterSigner(keys.verifyPem), /holds a public key: control signs with the private key/);
  assert.throws(() => new ClusterSigner(nodeKey), TypeError);
  assert.deepEqual(Object.keys(keys.signer), [], 'the private key is in no enumerable field');
});

test('keys other than Ed25519, and what is not a key, are refused with what is wrong', () => {
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
  assert.throws(() => signingKeyFromPem(rsa.privateKey.export({ type: 'pkcs8', format: 'pem' })), /an rsa key; the cluster's key is Ed25519/);
  assert.throws(() => verifyKeyFromPem(rsa.publicKey.export({ type: 'spki', format: 'pem' })), /an rsa key; the cluster's key is Ed25519/);
  assert.throws(() => signingKeyFromPem('REPLACE_ME'), /not a PEM private key/);
  assert.throws(() => verifyKeyFromPem('REPLACE_ME'), /not a PEM public key/);
  const encrypted = generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem', cipher: 'aes-256-cbc', passphrase: 'p' });
  assert.throws(() => signingKeyFromPem(encrypted), /encrypted with a passphrase/);
  assert.throws(() => verifyKeyFromPem(encrypted), /a node needs the public key only/);
  const sec1 = generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ type: 'sec1', format: 'pem' });
  assert.throws(() => verifyKeyFromPem(sec1), /a node needs the public key only/);
});
