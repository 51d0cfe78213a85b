import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { WebSocket } from 'ws';
import { MIN_FRAME_GAP_MS, PacedSender } from './frames.js';

/** A socket stand-in that records what was sent and when. */
function recorder() {
  const sent: Array<{ at: number; frame: Record<string, unknown> }> = [];
  const ws = { OPEN: 1, readyState: 1, send: (s: string) => sent.push({ at: performance.now(), frame: JSON.parse(s) }) };
  return { ws: ws as unknown as WebSocket, sent };
}

test('output that arrives while a frame waits is coalesced into it; frames are spaced apart', async () => {
  const { ws, sent } = recorder();
  const out = new PacedSender(ws);
  for (let i = 0; i < 100; i++) out.output('stdout', `line ${i}\n`);
  out.output('stderr', 'oops\n');
  out.output('stdout', 'after\n');
  out.send({ type: 'result', exit_code: 0 });
  out.send({ type: 'complete', success: true });
  await out.drained();
  assert.deepEqual(sent.map((s) => s.frame.type), ['stdout', 'stderr', 'stdout', 'result', 'complete']);
  assert.equal(sent[0]!.frame.data, Array.from({ length: 100 }, (_, i) => `line ${i}\n`).join(''));
  assert.ok(typeof sent[0]!.frame.timestamp === 'string');
  for (let i = 1; i < sent.length; i++) {
    assert.ok(sent[i]!.at - sent[i - 1]!.at >= MIN_FRAME_GAP_MS - 0.5, `gap ${i}: ${sent[i]!.at - sent[i - 1]!.at}`);
  }
});

test('nothing is sent once the socket is closed, and stop() releases waiters', async () => {
  const { ws, sent } = recorder();
  const out = new PacedSender(ws);
  out.output('stdout', 'a');
  (ws as unknown as { readyState: number }).readyState = 3;
  out.output('stdout', 'b');
  out.send({ type: 'complete' });
  const drained = out.drained();
  out.stop();
  await drained;
  assert.equal(sent.length, 0);
});
