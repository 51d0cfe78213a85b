// Host-side operations in trees a tenant wrote never follow the tenant's symlinks.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, test } from 'node:test';
import { lstatBeneath, rmdirBeneath, unlinkEmptyFileBeneath } from './beneath.js';

describe('operations beneath a tenant-written tree', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-beneath-'));
  const upper = join(dir, 'upper');
  const host = join(dir, 'host');
  after(() => rmSync(dir, { recursive: true, force: true }));

  test('a path through a symlink is refused; the host files it points at stay', async () => {
    mkdirSync(join(upper, 'real', 'empty-dir'), { recursive: true });
    writeFileSync(join(upper, 'real', 'empty-file'), '');
    mkdirSync(join(host, 'state'), { recursive: true });
    writeFileSync(join(host, 'init'), '');
    symlinkSync(host, join(upper, '.sb'));

    assert.equal(await lstatBeneath(upper, '.sb/init'), undefined);
    assert.equal(await unlinkEmptyFileBeneath(upper, '.sb/init'), false);
    assert.equal(await rmdirBeneath(upper, '.sb/state'), false);
    assert.equal(await rmdirBeneath(upper, '.sb'), false, 'the link itself is not a directory');
    assert.ok(existsSync(join(host, 'init')) && existsSync(join(host, 'state')), 'host files untouched');
    assert.equal((await lstatBeneath(upper, '.sb'))?.isSymbolicLink(), true);
    assert.equal(await lstatBeneath(upper, '../host/init'), undefined, 'no way up');

    assert.equal(await unlinkEmptyFileBeneath(upper, 'real/empty-file'), true);
    assert.equal(await rmdirBeneath(upper, 'real/empty-dir'), true);
    assert.ok(!existsSync(join(upper, 'real', 'empty-file')) && !existsSync(join(upper, 'real', 'empty-dir')));
  });
});
