import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { ServiceError } from '@sandboxd/protocol';
import { SqliteStore } from '../store/sqlite.js';
import { KeyService } from './keys.js';
import { Revocations } from './revocations.js';
import { TokenService } from './tokens.js';

const dir = mkdtempSync(join(tmpdir(), 'sbd-revocations-'));
after(() => rmSync(dir, { recursive: true, force: true }));

const revoked = (p: Promise<unknown>) => assert.rejects(p, (e: unknown) => e instanceof ServiceError && e.code === 'AUTHENTICATION_ERROR' && /revoked/.test(e.message));

test("a key revoked before the start, by this process, or by another process sharing the store ends the tokens it made here", async () => {
  const store = SqliteStore.open(':memory:');
  const keys = new KeyService(store);
  const org = await keys.createOrg('acme');
  const [a, b, c] = await Promise.all([1, 2, 3].map(() => keys.createKey(org.id, {})));
  const tokens = new TokenService(join(dir, 'jwt.pem'), 3600);
  const made = async (k: { key: { id: string } }) => (await tokens.issue('sb1', org.id, k.key.id)).token;
  const [ta, tb, tc] = [await made(a!), await made(b!), await made(c!)];
  await keys.revoke(a!.key.id); // before this process started watching

  const r = new Revocations(store, tokens, () => undefined);
  await r.start(50);
  keys.whenRevoked((id) => r.now(id));
  await revoked(tokens.verify(ta, 'sb1'));
  await tokens.verify(tb, 'sb1');
  await keys.revoke(b!.key.id); // here: at once
  await revoked(tokens.verify(tb, 'sb1'));
  await tokens.verify(tc, 'sb1');
  // Another process (a replica, `sandboxd keys revoke`): only the store knows.
  await new KeyService(store).revoke(c!.key.id);
  for (let i = 0; ; i++) {
    const ok = await tokens.verify(tc, 'sb1').then(() => true, () => false);
    if (!ok) break;
    assert.ok(i < 100, 'seen within a few intervals');
    await new Promise((res) => setTimeout(res, 20));
  }
  await revoked(tokens.verify(tc, 'sb1'));
  r.stop();
  store.close();
});
