import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../config/index.js';
import { announce } from './banner.js';

const HOST = { cpus: 2, memoryMb: 4096, diskGb: 20 };
const KEY = 'sbd_0123456789abcdefghijklmnopqrstuv';

function said(env: Record<string, string>, tty: boolean, banner = false) {
  const config = loadConfig({ SANDBOXD_DATA_DIR: '/var/lib/sbd-test', ...env }, HOST);
  const written: string[] = [];
  const events: Array<{ msg: string; extra?: Record<string, unknown> }> = [];
  announce(config, { url: 'http://127.0.0.1:8080', apiKey: KEY }, (msg, extra) => events.push({ msg, extra }), { isTTY: tty, write: (s: string) => written.push(s) }, { banner });
  return { written: written.join(''), events };
}

test('on a terminal: the banner in plain text, the key in it, and no log event', () => {
  const { written, events } = said({}, true);
  assert.deepEqual(events, []);
  assert.match(written, /^\nsandboxd is listening on http:\/\/127\.0\.0\.1:8080\n {2}API key: {3}sbd_0123456789abcdefghijklmnopqrstuv\n/);
  assert.match(written, /console: {3}http:\/\/127\.0\.0\.1:8080\/console/);
});

test('off a terminal: one log event with where it listens and where the key is, never the key', () => {
  for (const [env, keyIn] of [
    [{}, '/var/lib/sbd-test/api-key'],
    [{ SANDBOXD_BOOTSTRAP_API_KEY: KEY }, 'SANDBOXD_BOOTSTRAP_API_KEY'],
  ] as const) {
    const { written, events } = said(env, false);
    assert.equal(written, '', 'nothing on stdout');
    assert.equal(events.length, 1);
    assert.equal(events[0]!.msg, 'sandboxd is listening');
    assert.equal(events[0]!.extra!.url, 'http://127.0.0.1:8080');
    assert.equal(events[0]!.extra!.console, 'http://127.0.0.1:8080/console');
    assert.equal(events[0]!.extra!.api_key_in, keyIn);
    assert.ok(!JSON.stringify(events).includes(KEY));
  }
});

test('the all-in-one off a terminal: the banner with the key (npm start prints it wherever its output goes), and the event', () => {
  const { written, events } = said({}, false, true);
  assert.match(written, /API key: {3}sbd_0123456789abcdefghijklmnopqrstuv/);
  assert.equal(events.length, 1);
  assert.ok(!JSON.stringify(events).includes(KEY), 'the event never carries the key');
});
