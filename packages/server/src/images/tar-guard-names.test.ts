// TarGuard remembers every name of the archive (parents, duplicates, hard links): from a hostile
// sender (a node's snapshot: up to 2,000,000 entries of up to 4096-byte names, 8 GB of names) what
// it keeps per name must be small, not the name: control's heap is every tenant's.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CANONICAL_ID_OFFSET, LEGACY_ID_OFFSET } from '../runtime/ids.js';
import { TarGuard, TarRefused } from './tar-guard.js';

const O = CANONICAL_ID_OFFSET;

function header(name: string, type: string, size: number, link = ''): Buffer {
  const h = Buffer.alloc(512);
  const put = (off: number, len: number, v: string) => h.write(v, off, len, 'latin1');
  const oct = (off: number, len: number, n: number) => put(off, len, n.toString(8).padStart(len - 1, '0') + '\0');
  put(0, 100, name);
  oct(100, 8, 0o755);
  oct(108, 8, 0);
  oct(116, 8, 0);
  oct(124, 12, size);
  oct(136, 12, 1_700_000_000);
  put(156, 1, type);
  put(157, 100, link);
  put(257, 8, 'ustar\u000000');
  h.fill(0x20, 148, 156);
  let sum = 0;
  for (const b of h) sum += b;
  oct(148, 8, sum);
  return h;
}

function record(k: string, v: string): string {
  const body = ` ${k}=${v}\n`;
  let len = body.length + 1;
  while (String(len).length + body.length !== len) len++;
  return `${len}${body}`;
}

/** One entry, its name (and link) in a pax header, owned by the canonical root (or `owner`). */
function entry(name: string, type: string, link?: string, owner = O): Buffer {
  const pax = Buffer.from(record('path', name) + record('uid', String(owner)) + record('gid', String(owner)) + (link ? record('linkpath', link) : ''), 'utf8');
  const padded = Buffer.concat([pax, Buffer.alloc((512 - (pax.length % 512)) % 512)]);
  return Buffer.concat([header('PaxHeaders/x', 'x', pax.length), padded, header('x', type, 0)]);
}

describe('TarGuard: the names it keeps', () => {
  test('long names are kept as short keys, and still checked as names', () => {
    const guard = new TarGuard({ maxBytes: 1024 ** 3 });
    const parts: Buffer[] = [entry('./', '5')];
    // A 15-deep chain of 250-byte directories, then files of ~4000-byte names in it.
    let dir = '.';
    for (let i = 0; i < 15; i++) {
      dir += `/${String(i).padStart(3, '0')}${'d'.repeat(247)}`;
      parts.push(entry(`${dir}/`, '5'));
    }
    for (let i = 0; i < 200; i++) parts.push(entry(`${dir}/${String(i).padStart(5, '0')}${'f'.repeat(200)}`, '0'));
    // A hard link to one of them, by its long name.
    parts.push(entry(`${dir}/link`, '1', `${dir}/00007${'f'.repeat(200)}`));
    for (const p of parts) guard.push(p);
    const kinds = (guard as unknown as { kinds: Map<string, string> }).kinds;
    assert.equal(kinds.size, 1 + 15 + 200 + 1);
    const longest = Math.max(...[...kinds.keys()].map((k) => k.length));
    assert.ok(longest <= 64, `the longest key kept is ${longest} characters`);
    // Still names: one twice is refused, and so is a child of a file or of a directory not made.
    assert.throws(() => new TarGuard({ maxBytes: 1024 ** 3 }).push(Buffer.concat([...parts, entry(`${dir}/00003${'f'.repeat(200)}`, '0')])), TarRefused);
    assert.throws(() => new TarGuard({ maxBytes: 1024 ** 3 }).push(Buffer.concat([...parts, entry(`${dir}/00003${'f'.repeat(200)}/x`, '0')])), TarRefused);
    assert.throws(() => new TarGuard({ maxBytes: 1024 ** 3 }).push(Buffer.concat([...parts, entry(`${dir}x/f`, '0')])), TarRefused);
    assert.throws(() => new TarGuard({ maxBytes: 1024 ** 3 }).push(Buffer.concat([...parts, entry(`${dir}/l2`, '1', `${dir}/00999${'f'.repeat(200)}`)])), TarRefused);
  });

  test('a snapshot layer (canonicalOnly) in the legacy id range is refused; a fetched one may still be', () => {
    const legacy = Buffer.concat([entry('./', '5', undefined, LEGACY_ID_OFFSET), entry('./f', '0', undefined, LEGACY_ID_OFFSET)]);
    assert.doesNotThrow(() => new TarGuard({ maxBytes: 1024 ** 2 }).push(legacy));
    assert.throws(() => new TarGuard({ maxBytes: 1024 ** 2, canonicalOnly: true }).push(legacy), TarRefused);
    assert.doesNotThrow(() => new TarGuard({ maxBytes: 1024 ** 2, canonicalOnly: true }).push(Buffer.concat([entry('./', '5'), entry('./f', '0')])));
  });
});
