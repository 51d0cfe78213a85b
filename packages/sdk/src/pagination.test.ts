import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Paginator, type Page } from './pagination.js';
import { SandboxdError } from './errors.js';

function pagesOf(pages: Page<number>[]) {
  const cursors: Array<string | undefined> = [];
  const fetcher = async (cursor: string | undefined): Promise<Page<number>> => {
    cursors.push(cursor);
    const i = cursor === undefined ? 0 : Number(cursor);
    return pages[i]!;
  };
  return { cursors, fetcher };
}

test('iterates items across pages following next_cursor', async () => {
  const { cursors, fetcher } = pagesOf([
    { data: [1, 2], hasMore: true, nextCursor: '1' },
    { data: [3], hasMore: true, nextCursor: '2' },
    { data: [4, 5], hasMore: false, nextCursor: null },
  ]);
  assert.deepEqual(await new Paginator(fetcher).toArray(), [1, 2, 3, 4, 5]);
  assert.deepEqual(cursors, [undefined, '1', '2']);
});

test('fetches lazily and stops at maxItems without fetching further pages', async () => {
  const { cursors, fetcher } = pagesOf([
    { data: [1, 2], hasMore: true, nextCursor: '1' },
    { data: [3, 4], hasMore: true, nextCursor: '2' },
    { data: [5], hasMore: false, nextCursor: null },
  ]);
  assert.deepEqual(await new Paginator(fetcher, { maxItems: 3 }).toArray(), [1, 2, 3]);
  assert.deepEqual(cursors, [undefined, '1']);
  const early: number[] = [];
  for await (const n of new Paginator(pagesOf([{ data: [7, 8], hasMore: true, nextCursor: '1' }]).fetcher)) {
    early.push(n);
    break;
  }
  assert.deepEqual(early, [7]);
});

test('pages() yields whole pages, including empty ones', async () => {
  const { fetcher } = pagesOf([
    { data: [], hasMore: true, nextCursor: '1' },
    { data: [1], hasMore: false, nextCursor: null },
  ]);
  const pages = [];
  for await (const p of new Paginator(fetcher).pages()) pages.push(p.data);
  assert.deepEqual(pages, [[], [1]]);
});

test('has_more without a new cursor is an error, not an endless loop', async () => {
  const missing = pagesOf([{ data: [1], hasMore: true, nextCursor: null }]);
  await assert.rejects(new Paginator(missing.fetcher).toArray(), (e: unknown) => e instanceof SandboxdError && e.code === 'INVALID_RESPONSE');
  let calls = 0;
  const repeating = async (): Promise<Page<number>> => {
    calls++;
    return { data: [1], hasMore: true, nextCursor: 'same' };
  };
  await assert.rejects(new Paginator(repeating).toArray(), SandboxdError);
  assert.equal(calls, 2);
});
