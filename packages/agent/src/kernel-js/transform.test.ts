import { test } from 'node:test';
import assert from 'node:assert/strict';
import { prepareCell } from './transform.js';

test('top-level declarations become global names; the last expression is returned; lines stay', () => {
  const out = prepareCell('const a = 1\nlet { b, c: [d] } = o\nfunction f() {}\nclass K {}\na + d')!;
  assert.equal(
    out,
    'var a, b, d, f, K; (async () => { globalThis["f"] = f; void (a = 1);\nvoid ({ b, c: [d] } = o);\nfunction f() {}\nvoid (K = class K {});\nreturn (a + d);\n})()',
  );
  assert.equal(out.split('\n').length, 'const a = 1\nlet { b, c: [d] } = o\nfunction f() {}\nclass K {}\na + d'.split('\n').length + 1, 'one line more: the closing one');
});

test('imports become dynamic imports; let without a value is reset; var without one is kept', () => {
  assert.equal(
    prepareCell('import fs, { join as j } from "node:path"\nimport * as ns from "x"'),
    'var fs, j, ns; (async () => { const __sbxModule0 = await __sbxImport("node:path"); fs = __sbxModule0.default; j = __sbxModule0["join"];\nconst __sbxModule1 = await __sbxImport("x"); ns = __sbxModule1;\n})()',
  );
  assert.equal(prepareCell('let x; var y'), 'var x, y; (async () => { void (x = undefined); \n})()');
});

test('only top-level statements change; a cell that does not parse is left to the engine', () => {
  assert.equal(prepareCell('function g() { const inner = 1; return inner }'), 'var g; (async () => { globalThis["g"] = g; function g() { const inner = 1; return inner }\n})()');
  assert.equal(prepareCell('if (x) { let y = 1 }'), '(async () => { if (x) { let y = 1 }\n})()');
  assert.equal(prepareCell('await f()'), '(async () => { return (await f());\n})()');
  assert.equal(prepareCell('const = 1'), null);
});
