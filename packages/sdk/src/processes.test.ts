import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { AgentClient } from './agent.js';
import { NotFoundError } from './errors.js';
import { HttpClient } from './http.js';
import { Processes, type AttachEvent } from './processes.js';

const sse = (name: string, data: unknown, id?: number) => `${id === undefined ? '' : `id: ${id}\n`}event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;

/** Processes over a fetch that answers each request with the next of `answers` (a function of the URL). */
function processesWith(answers: Array<(url: URL) => Response>): { processes: Processes; urls: URL[] } {
  const urls: URL[] = [];
  const fetchStub = (async (input: string | URL | Request) => {
    const url = new URL(String(input));
    urls.push(url);
    const next = answers.shift();
    if (!next) throw new TypeError('fetch failed');
    return next(url);
  }) as typeof fetch;
  const http = new HttpClient({ baseUrl: 'http://agent.test', fetch: fetchStub, maxRetries: 0, requestTimeoutMs: 10_000 });
  return { processes: new Processes({ http } as AgentClient), urls };
}

/** An SSE body that sends `text` and then breaks (as a daemon restart cuts it). */
function breaking(text: string): Response {
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(new TextEncoder().encode(text));
      setTimeout(() => c.error(new TypeError('terminated')), 5);
    },
  });
  return new Response(body, { headers: { 'content-type': 'text/event-stream' } });
}

test('an attach whose connection breaks attaches again from the offset it reached; nothing twice, nothing missed', async () => {
  const { processes, urls } = processesWith([
    () => breaking(sse('output', { stream: 'stdout', offset: 0, data: 'one\n' }, 4) + sse('output', { stream: 'stderr', offset: 4, data: 'two\n' }, 8)),
    () => new Response('', { status: 502, headers: { 'content-type': 'application/json' } }),
    () =>
      new Response(sse('lost', { offset: 8, bytes: 10 }) + sse('output', { stream: 'stdout', offset: 18, data: 'three\n' }, 24) + sse('exit', { status: 'failed', exit_code: 2, next_offset: 24 }), {
        headers: { 'content-type': 'text/event-stream' },
      }),
  ]);
  const out: string[] = [];
  let lost = 0;
  const a = processes.attach('proc_1', { since: 0, onStdout: (d) => out.push(d), onLost: (n) => (lost += n) });
  const events: AttachEvent[] = [];
  for await (const e of a) events.push(e);
  const exit = await a;
  assert.deepEqual(exit, { status: 'failed', exitCode: 2, nextOffset: 24 });
  assert.deepEqual(out, ['one\n', 'three\n']);
  assert.equal(lost, 10);
  assert.deepEqual(events.map((e) => e.type), ['stdout', 'stderr', 'lost', 'stdout']);
  assert.deepEqual(urls.map((u) => [u.pathname, u.searchParams.get('since')]), [
    ['/processes/proc_1/attach', '0'],
    ['/processes/proc_1/attach', '8'],
    ['/processes/proc_1/attach', '8'],
  ]);
  assert.equal(a.offset, 24);
});

test('an attach refused (404) fails at once; one that keeps breaking gives up after its budget', async () => {
  const { processes, urls } = processesWith([
    () => new Response(JSON.stringify({ code: 'PROCESS_NOT_FOUND', message: 'Process not found: proc_x' }), { status: 404, headers: { 'content-type': 'application/json' } }),
  ]);
  await assert.rejects(processes.attach('proc_x').wait(), NotFoundError);
  assert.equal(urls.length, 1);
  const down = processesWith([]);
  await assert.rejects(down.processes.attach('proc_y', { reconnectForMs: 300 }).wait(), /cannot reach/);
  assert.ok(down.urls.length >= 2, 'it tried again');
});

test('output() reads the JSON form', async () => {
  const { processes, urls } = processesWith([
    () =>
      Response.json({
        process_id: 'proc_1',
        status: 'running',
        exit_code: null,
        since: 4,
        next_offset: 12,
        start_offset: 0,
        end_offset: 12,
        lost_bytes: 0,
        complete: false,
        chunks: [
          { stream: 'stdout', offset: 4, data: 'ab\n' },
          { stream: 'stderr', offset: 7, data: 'oops\n' },
        ],
      }),
  ]);
  const o = await processes.output('proc_1', { since: 4, maxBytes: 100 });
  assert.equal(urls[0]!.search, '?since=4&max_bytes=100');
  assert.equal(o.text, 'ab\noops\n');
  assert.equal(o.nextOffset, 12);
  assert.equal(o.exitCode, null);
  assert.equal(o.complete, false);
});
