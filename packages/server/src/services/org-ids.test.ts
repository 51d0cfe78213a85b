import { test } from 'node:test';
import assert from 'node:assert/strict';
import { publicOrgId, storedOrgId } from './org-ids.js';

test('organization ids: stored org_ ids are shown as decimal digits and read back; other strings are not ids', () => {
  for (const id of ['org_3f9c2a7e51d84b6c9e07', 'org_00000000000000000001', 'org_ffffffffffffffffffff', 'org_00000000000000000000']) {
    const shown = publicOrgId(id);
    assert.match(shown, /^[0-9]+$/, id);
    assert.equal(storedOrgId(shown), id);
  }
  assert.equal(publicOrgId('org_3f9c2a7e51d84b6c9e07'), String(0x3f9c2a7e51d84b6c9e07n));
  assert.equal(publicOrgId('org_ffffffffffffffffffff'), '1208925819614629174706175');
  assert.equal(publicOrgId('org-test'), 'org-test', 'not a stored id: as it is');
  assert.equal(publicOrgId('org_3F9C2A7E51D84B6C9E07'), 'org_3F9C2A7E51D84B6C9E07', 'stored ids are lower case');
  assert.equal(storedOrgId('1208925819614629174706176'), undefined, 'past 80 bits');
  assert.equal(storedOrgId('12a'), undefined);
  assert.equal(storedOrgId(''), undefined);
  assert.equal(storedOrgId('9'.repeat(26)), undefined);
  assert.equal(storedOrgId('-1'), undefined);
});
