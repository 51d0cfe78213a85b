import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ClusterSigner, ClusterVerifier, generateClusterKeyPair } from '../runtime/cluster-auth.js';

/** A cluster's key pair for a test: control's signer, a node's verifier, and their PEMs. */
export interface TestClusterKeys {
  signer: ClusterSigner;
  verifier: ClusterVerifier;
  signingPem: string;
  verifyPem: string;
}

export function testClusterKeys(): TestClusterKeys {
  const { signingPem, verifyPem } = generateClusterKeyPair();
  return { signer: new ClusterSigner(signingPem), verifier: new ClusterVerifier(verifyPem), signingPem, verifyPem };
}

/**
 * A key pair written to files, as `sandboxd cluster keygen` would (for the processes a test starts:
 * control reads SANDBOXD_CLUSTER_SIGNING_KEY_FILE, a node SANDBOXD_CLUSTER_VERIFY_KEY(_FILE)).
 * `remove` deletes the files.
 */
export function testClusterKeyFiles(): TestClusterKeys & { signingKeyFile: string; verifyKeyFile: string; remove: () => void } {
  const keys = testClusterKeys();
  const dir = mkdtempSync(join(tmpdir(), 'sbd-cluster-keys-'));
  const signingKeyFile = join(dir, 'cluster-signing.pem');
  const verifyKeyFile = join(dir, 'cluster-verify.pem');
  writeFileSync(signingKeyFile, keys.signingPem, { mode: 0o600 });
  writeFileSync(verifyKeyFile, keys.verifyPem, { mode: 0o644 });
  return { ...keys, signingKeyFile, verifyKeyFile, remove: () => rmSync(dir, { recursive: true, force: true }) };
}
