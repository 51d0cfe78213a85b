import { test } from 'node:test';
import assert from 'node:assert/strict';
import { prepareCell } from './transform.js';

test('top-level declarations become global names; the last expression is returned; lines stay', () => {
  const out = prepareCell('const a = 1\nlet { b, c: [d] } = o\nfunction f() {}\nclass K {}\na + d')!;
  assert.equal(
    out,
    'var a, b, d, f, K; (async () => { globalThis["f"] = f; void (a = (1));\nvoid ({ b, c: [d] } = (o));\nfunction f() {}\nvoid (K = class K {});\nreturn [(a + d)];\n})()',
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
  assert.equal(prepareCell('await f()'), '(async () => { return [(await f())];\n})()');
  assert.equal(prepareCell('const = 1'), null);
});

test('lines are kept across multi-line declarations and imports; sequences, exports, #!, directives, object literals', () => {
  const multi = prepareCell('const a = 1,\n  b = 2\nimport {\n  x\n} from "y"\nboom()')!;
  assert.equal(multi.split('\n').findIndex((l) => l.includes('boom()')), 5, 'boom() stays on line 6');
  assert.match(prepareCell('const s = (1, 2)')!, /void \(s = \(1, 2\)\);/, 'a sequence stays one value');
  assert.match(prepareCell('export const e = 1')!, /^var e; \(async \(\) => \{ void \(e = \(1\)\);/);
  assert.equal(prepareCell('#!/usr/bin/env node\n1')!, '(async () => { \nreturn [(1)];\n})()');
  assert.equal(prepareCell('"use strict"\nfunction h() {}')!, 'var h; (async () => { "use strict"\nglobalThis["h"] = h; function h() {}\n})()');
  assert.equal(prepareCell('{ a: 1, b: 2 }')!, '(async () => { return [({ a: 1, b: 2 })];\n})()');
  assert.equal(prepareCell('{ let z = 1 }')!, '(async () => { { let z = 1 }\n})()', 'a block stays a block');
});
