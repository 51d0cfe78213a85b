import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Headers } from './headers.js';

// The stand-in must behave as the global (undici's) Headers for all Connect's server does with it.
const Native = globalThis.Headers;
const both = <T>(fn: (H: typeof Native) => T): [T, T] => [fn(Headers as unknown as typeof Native), fn(Native)];
const same = <T>(fn: (H: typeof Native) => T) => {
  const [ours, theirs] = both(fn);
  assert.deepEqual(ours, theirs);
};

test('construction from nothing, a record, pairs and another Headers', () => {
  same((H) => [...new H()]);
  same((H) => [...new H({ B: ' 2 ', a: '1', 'Content-Type': 'application/json' })]);
  same((H) => [...new H([['x-a', '1'], ['X-A', '2'], ['b', '3']])]);
  same((H) => [...new H(new H({ Connection: 'close', a: 'x' }))]);
  same((H) => [...new H(new Map([['k', 'v']]) as unknown as [string, string][])]);
});

test('get, set, append, has, delete: names case-insensitive, values combined with ", "', () => {
  same((H) => {
    const h = new H();
    h.append('Accept-Encoding', 'gzip');
    h.append('accept-encoding', ' br\t');
    const out: unknown[] = [h.get('ACCEPT-ENCODING'), h.has('accept-encoding'), h.get('missing'), h.has('missing')];
    h.set('Accept-Encoding', 'identity');
    out.push(h.get('accept-encoding'));
    h.delete('ACCEPT-encoding');
    out.push(h.get('accept-encoding'), h.has('accept-encoding'), [...h]);
    return out;
  });
});

test('iteration is sorted by name, set-cookie kept apart; forEach, entries, keys, values', () => {
  same((H) => {
    const h = new H();
    for (const [k, v] of [['z', '1'], ['Set-Cookie', 'a=1'], ['a', '2'], ['set-cookie', 'b=2'], ['A', '3']] as const) h.append(k, v);
    const seen: string[][] = [];
    h.forEach((v, k, self) => seen.push([k, v, String(self === h)]));
    return [seen, [...h.entries()], [...h.keys()], [...h.values()], h.getSetCookie(), h.get('set-cookie'), Object.prototype.toString.call(h)];
  });
});

// Connect's copyHeaders deletes every name of a Headers from within its forEach. The standard's
// iteration is live (undici's skips the name after each deleted one); ours goes over a snapshot,
// so it does what Connect means.
test('deleting while iterating with forEach (what Connect copyHeaders does) empties it', () => {
  const h = new Headers({ a: '1', b: '2', c: '3' });
  h.forEach((_, k) => h.delete(k));
  assert.deepEqual([...h], []);
});

test('invalid names and values throw TypeError, as the standard says', () => {
  for (const H of [Headers as unknown as typeof Native, Native]) {
    assert.throws(() => new H({ 'bad name': 'x' }), TypeError);
    assert.throws(() => new H().append('', 'x'), TypeError);
    assert.throws(() => new H().set('x', 'a\r\nb: c'), TypeError);
    assert.throws(() => new H().get('a:b'), TypeError);
    assert.throws(() => new H([['only-one']] as unknown as [string, string][]), TypeError);
  }
});
