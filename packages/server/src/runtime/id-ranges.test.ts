import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HostIdRegistry, IdRanges, RangeHeldElsewhere, rangeBase } from './id-ranges.js';

test('two data dirs sharing a host registry never get the same range; releases and prunes are per data dir', () => {
  const reg = mkdtempSync(join(tmpdir(), 'idreg-'));
  try {
    const a = new IdRanges(new HostIdRegistry(reg, '/data/a'));
    const b = new IdRanges(new HostIdRegistry(reg, '/data/b'));
    const fromA = [a.allocate('a1'), a.allocate('a2')];
    const fromB = [b.allocate('b1'), b.allocate('b2')];
    assert.equal(new Set([...fromA, ...fromB]).size, 4, `${fromA} ${fromB}`);
    assert.deepEqual(fromB, [rangeBase(2), rangeBase(3)], 'b skips what a holds');
    assert.throws(() => b.claim('b9', fromA[0]!), (e: unknown) => e instanceof RangeHeldElsewhere && /sandbox a1 of \/data\/a/.test((e as Error).message));
    a.release('a1');
    b.claim('b9', fromA[0]!);
    assert.equal(readdirSync(reg).length, 4);

    // A restarted b (empty memory) re-claims what its sandboxes hold; the prune drops its stale entries only.
    writeFileSync(join(reg, '77'), JSON.stringify({ dataDir: '/data/b', id: 'gone' }));
    writeFileSync(join(reg, '78'), JSON.stringify({ dataDir: '/data/c', id: 'other' }));
    const b2 = new IdRanges(new HostIdRegistry(reg, '/data/b'));
    for (const [id, base] of [['b1', fromB[0]!], ['b2', fromB[1]!], ['b9', fromA[0]!]] as const) b2.claim(id, base);
    b2.pruneRegistry();
    assert.deepEqual(readdirSync(reg).map(Number).sort((x, y) => x - y), [0, 1, 2, 3, 78]);
    assert.equal(a.allocate('a3'), rangeBase(4), 'nothing held is handed out again');
  } finally {
    rmSync(reg, { recursive: true, force: true });
  }
});
