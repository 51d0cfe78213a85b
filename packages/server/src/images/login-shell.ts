import { chmod, chown, lstat, readFile, rename, rm, utimes, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { DEFAULT_USER } from './default-user.js';

/**
 * E2B's client runs every command as `bash -l -c <cmd>`, so a login shell's start-up is paid on each
 * one. In Debian's files it costs processes that change nothing there: /etc/profile runs `id -u`
 * (again for PS1 in other shells) where bash already knows its EUID, and root's ~/.profile runs `mesg n`,
 * which without a terminal on stdin always fails. Each edit keeps what the file sets up: other
 * shells (dash has no EUID) still ask `id`, and `mesg n` still runs on a terminal.
 */
export interface LineEdit {
  from: string;
  to: string;
}

const PROFILE_EDITS: readonly LineEdit[] = [
  { from: 'if [ "$(id -u)" -eq 0 ]; then', to: 'if [ "${EUID:-$(id -u)}" -eq 0 ]; then' },
  { from: '    if [ "$(id -u)" -eq 0 ]; then', to: '    if [ "${EUID:-$(id -u)}" -eq 0 ]; then' },
];

const MESG_EDITS: readonly LineEdit[] = [
  { from: 'mesg n 2> /dev/null || true', to: 'if [ -t 0 ]; then mesg n 2> /dev/null || true; fi' },
];

/** Files (relative to the tree) and the edits each gets; a file without the `from` lines is left alone. */
export const LOGIN_SHELL_FILES: Readonly<Record<string, readonly LineEdit[]>> = {
  'etc/profile': PROFILE_EDITS,
  'root/.profile': MESG_EDITS,
  'etc/skel/.profile': MESG_EDITS,
  [`${DEFAULT_USER.home.slice(1)}/.profile`]: MESG_EDITS,
};

export type EditOutcome = 'edited' | 'already' | 'other-text' | 'absent';

const count = (lines: string[], line: string): number => lines.filter((l) => l === line).length;

/**
 * Applies `edits` to `text` when each `from` line is there exactly once (whole lines, exact), and
 * no `to` line is; says 'already' when the reverse holds. Anything else is a text we do not know
 * (another release, a local change): 'other-text', and the text is not touched.
 */
export function editText(text: string, edits: readonly LineEdit[]): { outcome: Exclude<EditOutcome, 'absent'>; text: string } {
  const lines = text.split('\n');
  const before = edits.map((e) => [count(lines, e.from), count(lines, e.to)]);
  if (before.every(([f, t]) => f === 0 && t === 1)) return { outcome: 'already', text };
  if (!before.every(([f, t]) => f === 1 && t === 0)) return { outcome: 'other-text', text };
  const out = lines.map((l) => edits.find((e) => e.from === l)?.to ?? l);
  return { outcome: 'edited', text: out.join('\n') };
}

/**
 * Edits one file of the tree in place of itself: a regular file only (a symlink is never followed
 * out of the tree), replaced by rename with its mode, owner and times kept.
 */
async function editFile(path: string, edits: readonly LineEdit[]): Promise<EditOutcome> {
  const st = await lstat(path).catch(() => null);
  if (!st?.isFile()) return 'absent';
  const { outcome, text } = editText(await readFile(path, 'utf8'), edits);
  if (outcome !== 'edited') return outcome;
  const tmp = `${path}.sbx-login-shell`;
  try {
    await writeFile(tmp, text, { flag: 'wx', mode: 0o600 });
    await chown(tmp, st.uid, st.gid);
    await chmod(tmp, st.mode & 0o7777);
    await utimes(tmp, st.atime, st.mtime);
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
  return 'edited';
}

/**
 * Makes a login shell of a freshly bootstrapped rootfs at `tree` (ids as inside the sandbox, before
 * the tree is shifted) start without needless processes. Idempotent; a file whose text is not the
 * one expected is left as it is, and the build goes on.
 */
export async function lightenLoginShell(tree: string): Promise<Record<string, EditOutcome>> {
  const result: Record<string, EditOutcome> = {};
  for (const [rel, edits] of Object.entries(LOGIN_SHELL_FILES)) result[rel] = await editFile(join(tree, rel), edits);
  return result;
}
