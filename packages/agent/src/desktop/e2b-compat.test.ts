import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEBIAN_NOVNC, DEBIAN_STARTXFCE4, e2bDesktopShims, NOVNC_LINK, STARTXFCE4_SCRIPT, STARTXFCE4_SHIM } from './e2b-compat.js';

test('the shims are written where Debian has the real thing and nothing is in their place, once', () => {
  const root = mkdtempSync(join(tmpdir(), 'sbx-shims-'));
  try {
    assert.deepEqual(e2bDesktopShims(root), [], 'no Xfce, no noVNC: nothing');
    mkdirSync(join(root, 'usr/bin'), { recursive: true });
    writeFileSync(join(root, DEBIAN_STARTXFCE4), '#!/bin/sh\n', { mode: 0o755 });
    mkdirSync(join(root, DEBIAN_NOVNC, 'utils'), { recursive: true });
    assert.equal(e2bDesktopShims(root).length, 2);
    assert.equal(readFileSync(join(root, STARTXFCE4_SHIM), 'utf8'), STARTXFCE4_SCRIPT);
    assert.equal(statSync(join(root, STARTXFCE4_SHIM)).mode & 0o777, 0o755);
    assert.equal(readlinkSync(join(root, NOVNC_LINK)), DEBIAN_NOVNC);
    assert.deepEqual(e2bDesktopShims(root), [], 'the second start writes nothing');

    // A template's own files win.
    const own = mkdtempSync(join(tmpdir(), 'sbx-shims-own-'));
    try {
      mkdirSync(join(own, 'usr/bin'), { recursive: true });
      mkdirSync(join(own, 'usr/local/bin'), { recursive: true });
      writeFileSync(join(own, DEBIAN_STARTXFCE4), '#!/bin/sh\n');
      writeFileSync(join(own, STARTXFCE4_SHIM), 'mine\n');
      mkdirSync(join(own, DEBIAN_NOVNC), { recursive: true });
      mkdirSync(join(own, NOVNC_LINK), { recursive: true });
      assert.deepEqual(e2bDesktopShims(own), []);
      assert.equal(readFileSync(join(own, STARTXFCE4_SHIM), 'utf8'), 'mine\n');
    } finally {
      rmSync(own, { recursive: true, force: true });
    }
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test('startxfce4: nothing while a session runs, else Debian\'s', () => {
  const dir = mkdtempSync(join(tmpdir(), 'sbx-startxfce4-'));
  try {
    const script = join(dir, 'startxfce4');
    writeFileSync(script, STARTXFCE4_SCRIPT, { mode: 0o755 });
    const bin = join(dir, 'bin');
    mkdirSync(bin);
    const withPgrep = (code: number) => {
      writeFileSync(join(bin, 'pgrep'), `#!/bin/sh\n[ "$1 $2" = "-x xfce4-session" ] || exit 2\nexit ${code}\n`, { mode: 0o755 });
      return spawnSync('/bin/sh', [script], { env: { PATH: bin }, encoding: 'utf8' });
    };
    const running = withPgrep(0);
    assert.deepEqual([running.status, running.stderr], [0, '']);
    // No session: it execs /usr/bin/startxfce4 (absent on a test host: the shell's 127 says it
    // tried; where Xfce is installed, that would start a session, so it is not run).
    if (existsSync(DEBIAN_STARTXFCE4)) return;
    const none = withPgrep(1);
    assert.equal(none.status, 127, none.stderr);
    assert.match(none.stderr, /\/usr\/bin\/startxfce4/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
