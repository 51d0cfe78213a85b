import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { agentArgv, FIRST_RESPONDER, nodeArgv } from './agent-runtime.js';

const node = nodeArgv({ dir: '/unused', loader: 'ld-linux-x86-64.so.2' }, '/.sb/agent/agent.cjs');

test('the agent starts behind its first responder when the bundle ships one, as Node alone otherwise', () => {
  const dir = mkdtempSync(join(tmpdir(), 'agent-argv-'));
  try {
    assert.deepEqual(agentArgv(node, dir), node);
    writeFileSync(join(dir, FIRST_RESPONDER), '', { mode: 0o711 });
    assert.deepEqual(agentArgv(node, dir), [`/.sb/agent/${FIRST_RESPONDER}`, ...node]);
    // Node's argv is passed whole: sbx-first execs it in its own process.
    assert.equal(node[0], '/.sb/node/lib/ld-linux-x86-64.so.2');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
