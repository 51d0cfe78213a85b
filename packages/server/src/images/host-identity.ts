import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** The hostname a bootstrapped image names, and the one its packages' scripts see while installing. */
export const NEUTRAL_HOSTNAME = 'sandbox';

/**
 * Files mmdebstrap copies from the host (/etc/hostname, /etc/resolv.conf) or that could carry the
 * host's name, and what an image holds instead: an image is shared by every tenant and must say
 * nothing about the machine that built it. resolv.conf stays empty: it is a mount target, over
 * which the runtime puts the resolver sandboxes use.
 */
export const NEUTRAL_FILES: Readonly<Record<string, string>> = {
  'etc/hostname': `${NEUTRAL_HOSTNAME}\n`,
  'etc/resolv.conf': '',
  'etc/hosts': '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n',
};

/** Host-derived files an image has no use for (an MTA's configuration writes it from the host's name). */
export const REMOVED_FILES: readonly string[] = ['etc/mailname'];

/** Puts the neutral files in place; a symlink in their place is replaced, never followed. */
export async function neutralizeHostFiles(tree: string): Promise<void> {
  for (const [rel, content] of Object.entries(NEUTRAL_FILES)) {
    const p = join(tree, rel);
    await rm(p, { force: true });
    await writeFile(p, content, { flag: 'wx', mode: 0o644 });
  }
  for (const rel of REMOVED_FILES) await rm(join(tree, rel), { force: true });
}
