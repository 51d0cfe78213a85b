import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseSse, type SseEvent } from './sse.js';

async function collect(chunks: string[]): Promise<SseEvent[]> {
  const out: SseEvent[] = [];
  async function* gen() {
    for (const c of chunks) yield new TextEncoder().encode(c);
  }
  for await (const e of parseSse(gen())) out.push(e);
  return out;
}

test('parses events split anywhere across chunks', async () => {
  const text = 'event: log\ndata: {"level":"info","message":"step 1"}\n\n: keep-alive\n\nevent: done\ndata: {"status":"active"}\n\n';
  const whole = await collect([text]);
  assert.deepEqual(whole, [
    { event: 'log', data: '{"level":"info","message":"step 1"}' },
    { event: 'done', data: '{"status":"active"}' },
  ]);
  for (let i = 1; i < text.length; i++) {
    assert.deepEqual(await collect([text.slice(0, i), text.slice(i)]), whole, `split at ${i}`);
  }
});

test('handles CRLF, multi-line data, ids, default event name and a missing final blank line', async () => {
  const events = await collect(['id: 7\r\ndata: a\r\ndata: b\r', '\n\r\nevent: done\ndata:x']);
  assert.deepEqual(events, [
    { event: 'message', data: 'a\nb', id: '7' },
    { event: 'done', data: 'x', id: '7' },
  ]);
});

test('a multi-byte character split between chunks survives', async () => {
  const bytes = new TextEncoder().encode('data: héllo ✓\n\n');
  async function* gen() {
    for (const b of bytes) yield new Uint8Array([b]);
  }
  const out = [];
  for await (const e of parseSse(gen())) out.push(e.data);
  assert.deepEqual(out, ['héllo ✓']);
});
