import { closeSync, existsSync, fchmodSync, mkdirSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ServiceError } from '@sandboxd/protocol';
import { ClusterSigner, generateClusterKeyPair, NODE_CREDENTIAL_DAYS, NODE_CREDENTIAL_MAX_DAYS } from './runtime/cluster-auth.js';

export const SIGNING_KEY_FILE = 'cluster-signing.pem';
export const VERIFY_KEY_FILE = 'cluster-verify.pem';

/**
 * `sandboxd cluster keygen --out DIR`: a new Ed25519 key pair of a cluster. cluster-signing.pem
 * (0600) is for control (and edge) only; cluster-verify.pem (0644, public) goes to every node. An
 * existing file is never overwritten (a new pair locks every node out until each gets its new
 * public key): if either is there, nothing is written.
 */
export function keygen(outDir: string): { signing: string; verify: string } {
  const dir = resolve(outDir);
  const signing = join(dir, SIGNING_KEY_FILE);
  const verify = join(dir, VERIFY_KEY_FILE);
  const there = [signing, verify].filter((f) => existsSync(f));
  if (there.length) {
    throw new ServiceError('ALREADY_EXISTS', `${there.join(' and ')} already exist${there.length === 1 ? 's' : ''}: keygen overwrites no key (move ${there.length === 1 ? 'it' : 'them'} away, or choose another --out)`);
  }
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const { signingPem, verifyPem } = generateClusterKeyPair();
  const written: string[] = [];
  try {
    for (const [file, text, mode] of [
      [signing, signingPem, 0o600],
      [verify, verifyPem, 0o644],
    ] as const) {
      // wx: refused if the file appeared since the check above; the mode is set whatever the umask.
      const fd = openSync(file, 'wx', mode);
      written.push(file);
      try {
        fchmodSync(fd, mode);
        writeSync(fd, text);
      } finally {
        closeSync(fd);
      }
    }
  } catch (err) {
    for (const f of written) rmSync(f, { force: true });
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw new ServiceError('ALREADY_EXISTS', `${(err as NodeJS.ErrnoException).path ?? 'a key file'} already exists: keygen overwrites no key`);
    throw err;
  }
  return { signing, verify };
}

/**
 * `sandboxd cluster node-credential ID --out FILE [--days N]`: node ID's registry credential,
 * signed with the cluster's private key, good for `days` (1 to NODE_CREDENTIAL_MAX_DAYS), written
 * 0600 to FILE (never over a file there). With it (and SANDBOXD_CONTROL_URL) the node registers
 * through control and needs no database credentials; it renews it itself past half its life. One
 * made after `sandboxd nodes remove ID` admits the removed node again.
 */
export async function nodeCredential(nodeId: string, signingKeyFile: string, outFile: string, days: number = NODE_CREDENTIAL_DAYS): Promise<{ file: string; expiresAt: string }> {
  if (!Number.isInteger(days) || days < 1 || days > NODE_CREDENTIAL_MAX_DAYS) {
    throw new ServiceError('VALIDATION_ERROR', `--days takes a whole number of days from 1 to ${NODE_CREDENTIAL_MAX_DAYS} (a node renews its credential past half its life), not ${days}`);
  }
  let pem: string;
  try {
    pem = readFileSync(signingKeyFile, 'utf8');
  } catch (err) {
    throw new ServiceError('VALIDATION_ERROR', `the signing key cannot be read: ${(err as Error).message}`);
  }
  let token: string;
  const now = Date.now();
  try {
    token = await new ClusterSigner(pem).nodeCredentialFor(nodeId, { lifetimeSeconds: days * 86_400, now });
  } catch (err) {
    throw new ServiceError('VALIDATION_ERROR', (err as Error).message);
  }
  const file = resolve(outFile);
  let fd: number;
  try {
    fd = openSync(file, 'wx', 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') throw new ServiceError('ALREADY_EXISTS', `${file} already exists: node-credential overwrites nothing`);
    throw err;
  }
  try {
    fchmodSync(fd, 0o600);
    writeSync(fd, `${token}\n`);
  } finally {
    closeSync(fd);
  }
  return { file, expiresAt: new Date((Math.floor(now / 1000) + days * 86_400) * 1000).toISOString() };
}
