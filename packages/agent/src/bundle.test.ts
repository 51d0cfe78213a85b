import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { isBuiltin } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const bundle = join(dirname(fileURLToPath(import.meta.url)), '../bundle/agent.cjs');

// A module the agent resolves at run time is looked up in node_modules directories of the sandbox
// (/.sb/node_modules, /node_modules, ~/.node_modules), which root there writes: its code would
// run in the agent. `ws` asks for optional native modules (bufferutil, utf-8-validate) that way.
test('the agent bundle requires nothing but Node built-ins at run time', { skip: !existsSync(bundle) && 'bundle not built' }, () => {
  const text = readFileSync(bundle, 'utf8');
  const calls = [...text.matchAll(/(?<![\w$.])require\(([^)]*)\)/g)].map((m) => m[1]!.trim());
  assert.ok(calls.length > 0);
  const literal = calls.map((c) => /^"([^"]+)"$|^'([^']+)'$/.exec(c)).filter((m) => m !== null);
  assert.equal(literal.length, calls.length, `require() with a computed name: ${calls.filter((c) => !/^["']/.test(c)).join(', ')}`);
  const notBuiltin = literal.map((m) => m[1] ?? m[2]!).filter((name) => !isBuiltin(name));
  assert.deepEqual(notBuiltin, []);
});
