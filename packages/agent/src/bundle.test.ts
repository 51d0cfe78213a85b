import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { isBuiltin } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const dir = join(dirname(fileURLToPath(import.meta.url)), '../bundle');
const bundle = join(dir, 'agent.cjs');
const envd = join(dir, 'envd.cjs');

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

// E2B's daemon protocol ships beside the agent and is loaded only at the first /e2b/ request: by
// a path relative to agent.cjs (the read-only agent directory), never from node_modules.
test("E2B's daemon is a bundle of its own, loaded from beside agent.cjs, requiring only built-ins", { skip: !existsSync(bundle) && 'bundle not built' }, () => {
  assert.ok(existsSync(envd), 'envd.cjs is built beside agent.cjs');
  const agentText = readFileSync(bundle, 'utf8');
  assert.doesNotMatch(agentText, /@connectrpc|@bufbuild|connectNodeAdapter/, 'Connect and protobuf stay out of agent.cjs');
  const loads = [...agentText.matchAll(/\bimport\(([^)]*)\)/g)].map((m) => m[1]!.trim()).filter((name) => !isBuiltin(name.replace(/^["']|["']$/g, '')));
  assert.deepEqual(loads, ['"./envd.cjs"']);
  assert.deepEqual(
    requiredNames(envd).filter((name) => !isBuiltin(name)),
    [],
  );
});
