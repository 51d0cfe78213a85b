import { test } from 'node:test';
import assert from 'node:assert/strict';
import { LANGUAGE_ALIASES, normalizeLanguage } from '../proto.js';
import { agentNodeCommand, goSource } from './languages.js';

test('the agent runtime is re-used the way the agent itself was started', () => {
  const inSandbox = ['/.sb/node/lib/ld-linux-x86-64.so.2', '--library-path', '/.sb/node/lib', '/.sb/node/bin/node', '/.sb/agent/agent.cjs'];
  assert.deepEqual(agentNodeCommand(inSandbox, '/.sb/agent/agent.cjs'), inSandbox.slice(0, 4));
  assert.deepEqual(agentNodeCommand(['/usr/bin/node', '--max-semi-space-size=1', '/x/agent.cjs'], '/x/agent.cjs'), ['/usr/bin/node']);
  assert.deepEqual(agentNodeCommand([], '/x/agent.cjs'), [process.execPath]);
});

test('go snippets without a package clause get one', () => {
  assert.equal(goSource('package main\nfunc main(){}'), 'package main\nfunc main(){}');
  assert.equal(goSource('// c\npackage foo'), '// c\npackage foo');
  assert.equal(goSource('func main(){}'), 'package main\n\nfunc main(){}');
});

test('language aliases of api-decisions.md §4', () => {
  const expected: Record<string, string> = {
    python: 'python', python3: 'python', javascript: 'javascript', js: 'javascript', node: 'javascript',
    nodejs: 'javascript', bash: 'bash', sh: 'bash', shell: 'bash', go: 'go',
  };
  for (const [alias, lang] of Object.entries(expected)) {
    assert.equal(normalizeLanguage(alias), lang, alias);
    assert.ok(LANGUAGE_ALIASES.includes(alias));
  }
  assert.equal(normalizeLanguage(undefined), 'python');
  assert.equal(normalizeLanguage('PYTHON'), 'python');
  assert.equal(normalizeLanguage('cobol'), undefined);
  assert.equal(normalizeLanguage(''), undefined);
});
