import { randomBytes } from 'node:crypto';
import { open, realpath, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/**
 * Puts `text` in `file` in place of what it held, all at once: written to a file of its own in the
 * same directory (0600, whatever the umask), flushed to disk, then renamed over `file`, and the
 * directory flushed so the rename lasts. A crash leaves the old content or the new, never a part;
 * a reader never sees a file half written. A symbolic link is followed: the file it names is replaced.
 */
export async function replaceFile(file: string, text: string): Promise<void> {
  const target = await realpath(file).catch(() => file);
  const dir = dirname(target);
  const temp = join(dir, `.${basename(target)}.${randomBytes(6).toString('hex')}.tmp`);
  const fd = await open(temp, 'wx', 0o600);
  try {
    try {
      await fd.chmod(0o600);
      await fd.writeFile(text);
      await fd.sync();
    } finally {
      await fd.close();
    }
    await rename(temp, target);
  } catch (err) {
    await rm(temp, { force: true });
    throw err;
  }
  const d = await open(dir, 'r');
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}
