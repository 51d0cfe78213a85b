import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
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
  // The import() is the unbundled sources' way (tests); the bundle compiles envd.cjs itself, with
  // its code cache (src/e2b/code-cache.ts).
  assert.deepEqual(loads, ['"./envd.cjs"']);
  assert.match(agentText, /compileEnvd\(__dirname, require\)/);
  assert.deepEqual(
    requiredNames(envd).filter((name) => !isBuiltin(name)),
    [],
  );
  // Its protobuf descriptors are decoded at build time (embed-descriptors.mjs): no file is decoded
  // at load, so protobuf's own descriptor.proto, the schema decoding needs, is not even bundled.
  const envdText = readFileSync(envd, 'utf8');
  assert.doesNotMatch(envdText, /\bfileDesc\("/, 'no descriptor decoded at load');
  assert.doesNotMatch(envdText, /google\/protobuf\/descriptor\.proto/, 'descriptor.proto is not bundled');
});

// The code cache is made by the Node that builds under the agent's V8 flags: a Node that sets them
// as the agent does takes it, and one under other flags rejects it and loads envd.cjs from source.
test("envd.cjs's V8 code cache is taken under the agent's flags, and rejected cleanly under others", { skip: !existsSync(join(dir, 'envd.cjs.v8cache')) && 'no code cache built' }, () => {
  const here = dirname(fileURLToPath(import.meta.url));
  const probe = (flags: 'agent' | string[]) => {
    const src = `
      import { createRequire } from 'node:module';
      import { setFlagsFromString } from 'node:v8';
      import { setAgentV8Flags } from ${JSON.stringify(join(here, 'v8-flags.js'))};
      import { compileEnvd } from ${JSON.stringify(join(here, 'e2b/code-cache.js'))};
      const flags = ${JSON.stringify(flags)};
      if (flags === 'agent') setAgentV8Flags(); else for (const f of flags) setFlagsFromString(f);
      const compiled = compileEnvd(${JSON.stringify(dir)}, createRequire(import.meta.url));
      process.stdout.write(JSON.stringify({ cache: compiled.cache, createEnvd: typeof compiled.run().createEnvd }));
    `;
    return JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', src], { encoding: 'utf8' })) as unknown;
  };
  assert.deepEqual(probe('agent'), { cache: 'used', createEnvd: 'function' });
  assert.deepEqual(probe(['--no-lazy']), { cache: 'rejected', createEnvd: 'function' });
});
