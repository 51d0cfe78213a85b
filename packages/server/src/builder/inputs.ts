import { randomBytes } from 'node:crypto';
import { chmod, chown, constants, copyFile, mkdir, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { CANONICAL_ID_OFFSET } from '../runtime/ids.js';
import type { CopyInput } from './types.js';

export interface StagedInputs {
  /** Host path of each input's copy, in input order. */
  paths: string[];
  cleanup(): Promise<void>;
}

/**
 * A COPY step's inputs, readable by that step only. Uploaded blobs are tenants' files and stay
 * root's alone (0600); the step's container, where root is host uid CANONICAL_ID_OFFSET, gets its
 * own copy of each input, owned by that uid and 0400, in a root-only directory, removed when the
 * step ends. (A reflink where the filesystem has them, so a big input costs no second copy.)
 */
export async function stageCopyInputs(root: string, inputs: CopyInput[]): Promise<StagedInputs> {
  await mkdir(root, { recursive: true, mode: 0o700 });
  const dir = join(root, `${process.pid}-${randomBytes(6).toString('hex')}`);
  await mkdir(dir, { mode: 0o700 });
  const cleanup = () => rm(dir, { recursive: true, force: true });
  try {
    const paths: string[] = [];
    for (const [j, input] of inputs.entries()) {
      const p = join(dir, String(j));
      await copyFile(input.hostPath, p, constants.COPYFILE_FICLONE | constants.COPYFILE_EXCL);
      await chown(p, CANONICAL_ID_OFFSET, CANONICAL_ID_OFFSET);
      await chmod(p, 0o400);
      paths.push(p);
    }
    return { paths, cleanup };
  } catch (err) {
    await cleanup();
    throw err;
  }
}

/** Removes the staged inputs of steps whose process died (call at startup). */
export async function cleanupStaleInputs(root: string): Promise<void> {
  for (const n of await readdir(root).catch(() => [] as string[])) {
    const pid = Number(/^(\d+)-/.exec(n)?.[1]);
    if (pid && !alive(pid)) await rm(join(root, n), { recursive: true, force: true });
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
