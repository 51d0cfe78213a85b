import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface TestTls {
  /** The CA's certificate (PEM): what control is given as SANDBOXD_CLUSTER_CA_FILE. */
  ca: string;
  caFile: string;
  /** A server certificate signed by that CA for `names`, and its key (PEM). */
  cert: string;
  key: string;
  certFile: string;
  keyFile: string;
  remove: () => void;
}

/**
 * A throwaway CA and a server certificate it signed, made with openssl (P-256, two days), as an
 * operator's CA would issue a node's. `names`: the certificate's subjectAltNames, e.g.
 * `['IP:127.0.0.1', 'DNS:node-a.internal']`.
 */
export function makeTestTls(names: string[]): TestTls {
  const dir = mkdtempSync(join(tmpdir(), 'sbd-tls-'));
  const run = (args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes'];
  run(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=sandboxd test CA']);
  run(['req', ...ec, '-keyout', 'node.key', '-out', 'node.csr', '-subj', '/CN=sandboxd test node']);
  writeFileSync(join(dir, 'ext.cnf'), `subjectAltName=${names.join(',')}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n`);
  run(['x509', '-req', '-in', 'node.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'node.pem', '-days', '2', '-extfile', 'ext.cnf']);
  const file = (n: string) => join(dir, n);
  return {
    ca: readFileSync(file('ca.pem'), 'utf8'),
    caFile: file('ca.pem'),
    cert: readFileSync(file('node.pem'), 'utf8'),
    key: readFileSync(file('node.key'), 'utf8'),
    certFile: file('node.pem'),
    keyFile: file('node.key'),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}
