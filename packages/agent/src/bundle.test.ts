import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { isBuiltin } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const dir = join(dirname(fileURLToPath(import.meta.url)), '../bundle');
const bundle = join(dir, 'agent.cjs');

/** The names a bundle require()s at run time; fails on a computed one. */
function requiredNames(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const calls = [...text.matchAll(/(?<![\w$.])require\(([^)]*)\)/g)].map((m) => m[1]!.trim());
  assert.ok(calls.length > 0);
  const literal = calls.map((c) => /^"([^"]+)"$|^'([^']+)'$/.exec(c)).filter((m) => m !== null);
  assert.equal(literal.length, calls.length, `require() with a computed name: ${calls.filter((c) => !/^["']/.test(c)).join(', ')}`);
  return literal.map((m) => m[1] ?? m[2]!);
}

// A module the agent resolves at run time is looked up in node_modules directories of the sandbox
// (/.sb/node_modules, /node_modules, ~/.node_modules), which root there writes: its code would
// run in the agent. `ws` asks for optional native modules (bufferutil, utf-8-validate) that way.
test('the agent bundle requires nothing but Node built-ins at run time', { skip: !existsSync(bundle) && 'bundle not built' }, () => {
  assert.deepEqual(
    requiredNames(bundle).filter((name) => !isBuiltin(name)),
    [],
  );
});

// E2B's Connect protocol (Connect, protobuf) is the daemon's gateway's business: the agent serves
// plain routes below /e2b/rt, and ships none of it.
test('the agent bundle holds no Connect or protobuf code, and no envd.cjs ships beside it', { skip: !existsSync(bundle) && 'bundle not built' }, () => {
  const agentText = readFileSync(bundle, 'utf8');
  assert.doesNotMatch(agentText, /@connectrpc|@bufbuild|connectNodeAdapter|fileDesc\(/);
  assert.ok(!existsSync(join(dir, 'envd.cjs')), 'no envd.cjs');
  assert.ok(!existsSync(join(dir, 'envd.cjs.v8cache')), 'no envd.cjs.v8cache');
  assert.match(agentText, /\/e2b\/rt/, 'the plain routes are in agent.cjs');
});
