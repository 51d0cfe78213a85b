import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ServiceError } from '../proto.js';
import { button, coord, hexId, int, keyCombo, keyName, ocrLanguage, str, windowId } from './args.js';
import { parseGeometry } from './session.js';

const refused = (fn: () => unknown, field: string) =>
  assert.throws(fn, (err: unknown) => err instanceof ServiceError && err.code === 'VALIDATION_ERROR' && err.status === 400 && err.message.startsWith(`${field}:`) && err.extra.field === field);

test('coordinates and sizes: numbers in range, numeric strings accepted, the rest a 400 naming the field', () => {
  assert.equal(coord({ x: 12 }, 'x'), 12);
  assert.equal(coord({ x: '40' }, 'x'), 40);
  assert.equal(coord({ x: 3.6 }, 'x'), 4);
  assert.equal(coord({}, 'x', 0), 0);
  refused(() => coord({}, 'x'), 'x');
  refused(() => coord({ x: -1 }, 'x'), 'x');
  refused(() => coord({ x: 9000 }, 'x'), 'x');
  refused(() => coord({ x: '1; rm -rf /' }, 'x'), 'x');
  refused(() => coord({ x: Number.NaN }, 'x'), 'x');
  refused(() => int({ clicks: 11 }, 'clicks', 1, 10), 'clicks');
  refused(() => coord({ y: [1] }, 'y'), 'y');
});

test('buttons by name or X number', () => {
  assert.equal(button({}), 1);
  assert.equal(button({ button: 'right' }), 3);
  assert.equal(button({ button: 'Middle' }), 2);
  assert.equal(button({ button: 2 }), 2);
  assert.equal(button({ button: '3' }), 3);
  refused(() => button({ button: 'top' }), 'button');
  refused(() => button({ button: 0 }), 'button');
  refused(() => button({ button: '--help' }), 'button');
});

test('key names: X keysyms, friendly aliases, single characters; never an option or a control character', () => {
  assert.equal(keyName('Return', 'key'), 'Return');
  assert.equal(keyName('enter', 'key'), 'Return');
  assert.equal(keyName('ESC', 'key'), 'Escape');
  assert.equal(keyName('f5', 'key'), 'F5');
  assert.equal(keyName('a', 'key'), 'a');
  assert.equal(keyName('é', 'key'), 'é');
  assert.equal(keyName('+', 'key'), 'plus');
  assert.equal(keyName('-', 'key'), 'minus');
  assert.equal(keyName('Page_Down', 'key'), 'Page_Down');
  refused(() => keyName('--help', 'key'), 'key');
  refused(() => keyName('a b', 'key'), 'key');
  refused(() => keyName('\n', 'key'), 'key');
  refused(() => keyName('', 'key'), 'key');
  refused(() => keyName(5, 'key'), 'key');
  refused(() => keyName('x'.repeat(60), 'key'), 'key');
});

test('combinations: arrays or a+b strings, 1 to 8 keys, each checked', () => {
  assert.equal(keyCombo(['ctrl', 's'], 'keys'), 'ctrl+s');
  assert.equal(keyCombo(['Control', 'Shift', 't'], 'keys'), 'ctrl+shift+t');
  assert.equal(keyCombo('ctrl+alt+Delete', 'keys'), 'ctrl+alt+Delete');
  assert.equal(keyCombo('+', 'keys'), 'plus');
  assert.equal(keyCombo(['ctrl', '+'], 'keys'), 'ctrl+plus');
  refused(() => keyCombo([], 'keys'), 'keys');
  refused(() => keyCombo(new Array(9).fill('a'), 'keys'), 'keys');
  refused(() => keyCombo(['ctrl', '--sync'], 'keys'), 'keys[1]');
  refused(() => keyCombo({ a: 1 }, 'keys'), 'keys');
});

test('window ids: 0x-hex as wmctrl prints or decimal as xdotool prints', () => {
  assert.equal(windowId({ window_id: '0x01a00003' }), 0x01a00003);
  assert.equal(windowId({ window_id: '27262979' }), 27262979);
  assert.equal(windowId({ window_id: 27262979 }), 27262979);
  assert.equal(hexId(0x01a00003), '0x01a00003');
  refused(() => windowId({}), 'window_id');
  refused(() => windowId({ window_id: '0xzz' }), 'window_id');
  refused(() => windowId({ window_id: -4 }), 'window_id');
  refused(() => windowId({ window_id: '0x1ffffffff' }), 'window_id');
});

test('strings and OCR languages', () => {
  assert.equal(str({ text: '' }, 'text', 10, { allowEmpty: true }), '');
  refused(() => str({ text: '' }, 'text', 10), 'text');
  refused(() => str({ text: 'x'.repeat(11) }, 'text', 10), 'text');
  refused(() => str({ text: 'a\0' }, 'text', 10), 'text');
  assert.equal(ocrLanguage({}), 'eng');
  assert.equal(ocrLanguage({ language: 'eng+deu' }), 'eng+deu');
  refused(() => ocrLanguage({ language: '../../etc' }), 'language');
  refused(() => ocrLanguage({ language: '-l' }), 'language');
});

test('the template geometry (SANDBOXD_DESKTOP)', () => {
  assert.deepEqual(parseGeometry('1024x768x24'), { width: 1024, height: 768, depth: 24 });
  assert.deepEqual(parseGeometry('1280x720'), { width: 1280, height: 720, depth: 24 });
  assert.equal(parseGeometry('10x10'), null);
  assert.equal(parseGeometry('1024x768x7'), null);
  assert.equal(parseGeometry('big'), null);
});
