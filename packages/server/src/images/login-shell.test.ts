import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { editText, lightenLoginShell } from './login-shell.js';

// Debian 12 (bookworm) as mmdebstrap installs it: base-files' /etc/profile and /root/.profile.
const PROFILE = [
  '# /etc/profile: system-wide .profile file for the Bourne shell (sh(1))',
  '# and Bourne compatible shells (bash(1), ksh(1), ash(1), ...).',
  '',
  'if [ "$(id -u)" -eq 0 ]; then',
  '  PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"',
  'else',
  '  PATH="/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"',
  'fi',
  'export PATH',
  '',
  'if [ "${PS1-}" ]; then',
  '  if [ "${BASH-}" ] && [ "$BASH" != "/bin/sh" ]; then',
  '    # The file bash.bashrc already sets the default PS1.',
  "    # PS1='\\h:\\w\\$ '",
  '    if [ -f /etc/bash.bashrc ]; then',
  '      . /etc/bash.bashrc',
  '    fi',
  '  else',
  '    if [ "$(id -u)" -eq 0 ]; then',
  "      PS1='# '",
  '    else',
  "      PS1='$ '",
  '    fi',
  '  fi',
  'fi',
  '',
  'if [ -d /etc/profile.d ]; then',
  '  for i in /etc/profile.d/*.sh; do',
  '    if [ -r $i ]; then',
  '      . $i',
  '    fi',
  '  done',
  '  unset i',
  'fi',
  '',
].join('\n');

const ROOT_PROFILE = [
  '# ~/.profile: executed by Bourne-compatible login shells.',
  '',
  'if [ "$BASH" ]; then',
  '  if [ -f ~/.bashrc ]; then',
  '    . ~/.bashrc',
  '  fi',
  'fi',
  '',
  'mesg n 2> /dev/null || true',
  '',
].join('\n');

// /etc/skel/.profile has no `mesg n`: it must stay as it is.
const SKEL_PROFILE = '# ~/.profile\nif [ -n "$BASH_VERSION" ]; then\n    if [ -f "$HOME/.bashrc" ]; then\n\t. "$HOME/.bashrc"\n    fi\nfi\n';

function withTree(fn: (tree: string) => Promise<void>): () => Promise<void> {
  return async () => {
    const tree = mkdtempSync(join(tmpdir(), 'login-shell-'));
    try {
      await fn(tree);
    } finally {
      rmSync(tree, { recursive: true, force: true });
    }
  };
}

function put(tree: string, rel: string, text: string, mode = 0o644): string {
  const p = join(tree, rel);
  mkdirSync(join(p, '..'), { recursive: true });
  writeFileSync(p, text);
  chmodSync(p, mode);
  return p;
}

test('edits exactly the known lines of /etc/profile and root .profile, once, keeping mode, owner and times', withTree(async (tree) => {
  const profile = put(tree, 'etc/profile', PROFILE);
  const root = put(tree, 'root/.profile', ROOT_PROFILE, 0o640);
  const skel = put(tree, 'etc/skel/.profile', SKEL_PROFILE);
  if (process.getuid?.() === 0) chownSync(root, 7, 8);
  utimesSync(profile, new Date('2021-04-10T00:00:00Z'), new Date('2021-04-10T00:00:00Z'));
  const rootBefore = lstatSync(root);

  assert.deepEqual(await lightenLoginShell(tree), {
    'etc/profile': 'edited',
    'root/.profile': 'edited',
    'etc/skel/.profile': 'other-text',
    'home/user/.profile': 'absent',
  });
  const edited = readFileSync(profile, 'utf8');
  assert.equal(edited, PROFILE.replaceAll('"$(id -u)"', '"${EUID:-$(id -u)}"'));
  assert.equal(edited.split('\n').length, PROFILE.split('\n').length);
  assert.equal(readFileSync(root, 'utf8'), ROOT_PROFILE.replace('\nmesg n 2> /dev/null || true\n', '\nif [ -t 0 ]; then mesg n 2> /dev/null || true; fi\n'));
  assert.equal(readFileSync(skel, 'utf8'), SKEL_PROFILE);
  const rootAfter = lstatSync(root);
  assert.deepEqual([rootAfter.mode, rootAfter.uid, rootAfter.gid], [rootBefore.mode, rootBefore.uid, rootBefore.gid]);
  assert.ok(Math.abs(rootAfter.mtimeMs - rootBefore.mtimeMs) < 1, 'mtime kept (to the millisecond)');
  assert.equal(lstatSync(profile).mtime.toISOString(), '2021-04-10T00:00:00.000Z');

  // Again: nothing to do, nothing changed.
  assert.deepEqual(await lightenLoginShell(tree), {
    'etc/profile': 'already',
    'root/.profile': 'already',
    'etc/skel/.profile': 'other-text',
    'home/user/.profile': 'absent',
  });
  assert.equal(readFileSync(profile, 'utf8'), edited);
}));

test('a text that is not the expected one (another release, a local edit) is left alone', () => {
  const other = [
    PROFILE.replace('if [ "$(id -u)" -eq 0 ]; then\n  PATH', 'if [ "`id -u`" -eq 0 ]; then\n  PATH'),
    PROFILE.replace('    if [ "$(id -u)" -eq 0 ]; then', '    if [ "${EUID:-$(id -u)}" -eq 0 ]; then'),
    `${PROFILE}if [ "$(id -u)" -eq 0 ]; then\n  umask 022\nfi\n`,
    PROFILE.replaceAll('if [ "$(id -u)" -eq 0 ]; then', '  if [ "$(id -u)" -eq 0 ]; then'),
    '',
  ];
  for (const text of other) assert.deepEqual(editText(text, [
    { from: 'if [ "$(id -u)" -eq 0 ]; then', to: 'if [ "${EUID:-$(id -u)}" -eq 0 ]; then' },
    { from: '    if [ "$(id -u)" -eq 0 ]; then', to: '    if [ "${EUID:-$(id -u)}" -eq 0 ]; then' },
  ]), { outcome: 'other-text', text });
  assert.equal(editText('mesg n 2> /dev/null\n', [{ from: 'mesg n 2> /dev/null || true', to: 'x' }]).outcome, 'other-text');
});

test('a symlink in place of a file is neither followed nor replaced', withTree(async (tree) => {
  const outside = put(tree, 'outside', PROFILE);
  mkdirSync(join(tree, 'rootfs/etc'), { recursive: true });
  symlinkSync(outside, join(tree, 'rootfs/etc/profile'));
  assert.equal((await lightenLoginShell(join(tree, 'rootfs')))['etc/profile'], 'absent');
  assert.equal(readFileSync(outside, 'utf8'), PROFILE);
  assert.ok(lstatSync(join(tree, 'rootfs/etc/profile')).isSymbolicLink());
}));

const asRoot = process.getuid?.() === 0;

test('the edited files set up the same PATH and PS1 in bash and dash, as root and as uid 1000, and spare `id` and `mesg` in bash (root only)', { skip: !asRoot && 'needs root' }, withTree(async (tree) => {
  chmodSync(tree, 0o755);
  // The profiles' own lines, with profile.d and bash.bashrc pointed at empty places of the tree so
  // the host's files take no part.
  const hermetic = (text: string): string =>
    text.replaceAll('/etc/profile.d', join(tree, 'profile.d')).replaceAll('/etc/bash.bashrc', join(tree, 'bash.bashrc'));
  const orig = put(tree, 'orig/etc/profile', hermetic(PROFILE));
  put(tree, 'orig/root/.profile', ROOT_PROFILE);
  const edited = put(tree, 'edited/etc/profile', hermetic(PROFILE));
  put(tree, 'edited/root/.profile', ROOT_PROFILE);
  await lightenLoginShell(join(tree, 'edited'));
  assert.notEqual(readFileSync(edited, 'utf8'), readFileSync(orig, 'utf8'));

  // `id` and `mesg` that leave a mark, then do what the real ones do.
  const bin = join(tree, 'bin');
  const marks = join(tree, 'marks');
  mkdirSync(marks, { mode: 0o777 });
  chmodSync(marks, 0o777);
  put(tree, 'bin/id', `#!/bin/sh\necho id >> ${marks}/$(/usr/bin/id -u)\nexec /usr/bin/id "$@"\n`, 0o755);
  put(tree, 'bin/mesg', `#!/bin/sh\necho mesg >> ${marks}/$(/usr/bin/id -u)\nexec /usr/bin/mesg "$@"\n`, 0o755);
  const takeMarks = (uid: number): string[] => {
    const f = join(marks, String(uid));
    if (!existsSync(f)) return [];
    const m = readFileSync(f, 'utf8').trim().split('\n');
    rmSync(f);
    return m;
  };

  const run = (uid: number, shell: string, script: string, ps1: boolean): string => {
    const asUser = uid === 0 ? [] : ['setpriv', `--reuid=${uid}`, `--regid=${uid}`, '--clear-groups'];
    const env = ['env', '-i', `HOME=${tree}`, `PATH=${bin}:/usr/bin:/bin`, ...(ps1 ? ['PS1=> '] : [])];
    const args = shell === 'bash' ? ['bash', '--noprofile', '--norc', '-c', script] : ['dash', '-c', script];
    const [cmd, ...rest] = [...asUser, ...env, ...args];
    return execFileSync(cmd!, rest, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  };

  for (const uid of [0, 1000]) {
    for (const shell of ['bash', 'dash']) {
      for (const ps1 of [false, true]) {
        const show = (file: string): string => run(uid, shell, `. ${file}; echo "$PATH|\${PS1-unset}"`, ps1);
        const before = show(orig);
        const beforeMarks = takeMarks(uid);
        const after = show(edited);
        const afterMarks = takeMarks(uid);
        const what = `uid ${uid}, ${shell}, PS1 ${ps1 ? 'set' : 'unset'}`;
        assert.equal(after, before, what);
        assert.match(after, uid === 0 ? /^\/usr\/local\/sbin:/ : /:\/usr\/games\|/, what);
        // The first test runs with the caller's PATH (ours); a second one (dash, PS1) finds the real id.
        assert.deepEqual(beforeMarks, ['id'], what);
        // bash knows its EUID; dash has none and still asks `id`.
        assert.deepEqual(afterMarks, shell === 'bash' ? [] : beforeMarks, what);
      }
    }
  }

  // root's .profile: without a terminal `mesg n` is not run (it could only fail), and the result is the same.
  const rootProfile = (dir: string): string => run(0, 'bash', `. ${join(tree, dir, 'root/.profile')}; echo "rc=$?"`, false);
  assert.equal(rootProfile('orig'), 'rc=0\n');
  assert.deepEqual(takeMarks(0), ['mesg']);
  assert.equal(rootProfile('edited'), 'rc=0\n');
  assert.deepEqual(takeMarks(0), []);
  // On a terminal it still runs.
  execFileSync('script', ['-qec', `env -i HOME=${tree} PATH=${bin}:/usr/bin:/bin bash --noprofile --norc -c '. ${join(tree, 'edited/root/.profile')}'`, '/dev/null'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  assert.deepEqual(takeMarks(0), ['mesg']);
}));
