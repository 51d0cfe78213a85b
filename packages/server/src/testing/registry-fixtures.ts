import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SignJWT, importPKCS8 } from 'jose';
import { sha256 } from './oci-fixtures.js';

/** A real distribution registry (Debian's docker-registry) on 127.0.0.1, optionally behind token auth. */
export interface TestRegistry {
  url: string;
  /** Push credentials (token auth only): tests push with them, pulls may go anonymous or not. */
  pushAuth?: (repo: string) => Promise<string>;
  /** Token requests the token service answered (token auth only). */
  tokenRequests: URL[];
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as AddressInfo).port;
  await new Promise((r) => srv.close(r));
  return port;
}

/**
 * Starts `docker-registry serve` with filesystem storage in `dir`. With `token`, the registry
 * trusts a self-signed CA made here, and a small token service (Docker's token protocol) signs
 * JWTs with it: only the user `puller` (password `secret`) gets pull access, `pusher` gets push.
 */
export async function startRegistry(dir: string, opts: { token?: boolean } = {}): Promise<TestRegistry> {
  const port = await freePort();
  const tokenRequests: URL[] = [];
  let tokenServer: Server | undefined;
  let auth = '';
  let pushAuth: TestRegistry['pushAuth'];
  if (opts.token) {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', join(dir, 'ca.key'), '-out', join(dir, 'ca.crt'), '-days', '1', '-subj', '/CN=sandboxd test token CA'], {
      stdio: 'ignore',
    });
    const key = await importPKCS8(readFileSync(join(dir, 'ca.key'), 'utf8'), 'RS256');
    const certDer = execFileSync('openssl', ['x509', '-in', join(dir, 'ca.crt'), '-outform', 'DER']).toString('base64');
    const tokenPort = await freePort();
    const sign = async (repo: string, actions: string[]) =>
      new SignJWT({ access: [{ type: 'repository', name: repo, actions }] })
        .setProtectedHeader({ alg: 'RS256', typ: 'JWT', x5c: [certDer] })
        .setIssuer('sandboxd-test-issuer')
        .setAudience('sandboxd-test-registry')
        .setSubject('test')
        .setIssuedAt()
        .setNotBefore('-1m')
        .setExpirationTime('5m')
        .setJti(Math.random().toString(36).slice(2))
        .sign(key);
    tokenServer = createHttpServer((req, res) => {
      void (async () => {
        const u = new URL(req.url ?? '/', `http://127.0.0.1:${tokenPort}`);
        tokenRequests.push(u);
        const basic = req.headers.authorization?.startsWith('Basic ')
          ? Buffer.from(req.headers.authorization.slice(6), 'base64').toString()
          : '';
        const scope = /^repository:([^:]+):(.+)$/.exec(u.searchParams.get('scope') ?? '');
        const actions = basic === 'pusher:secret' ? ['pull', 'push'] : basic === 'puller:secret' ? ['pull'] : [];
        res.setHeader('content-type', 'application/json');
        if (!scope || actions.length === 0) {
          res.statusCode = 401;
          res.end(JSON.stringify({ details: 'bad credentials' }));
          return;
        }
        res.end(JSON.stringify({ token: await sign(scope[1]!, actions) }));
      })();
    });
    await new Promise<void>((r) => tokenServer!.listen(tokenPort, '127.0.0.1', r));
    auth = `auth:
  token:
    realm: http://127.0.0.1:${tokenPort}/token
    service: sandboxd-test-registry
    issuer: sandboxd-test-issuer
    rootcertbundle: ${join(dir, 'ca.crt')}
`;
    pushAuth = async (repo: string) => {
      const res = await fetch(`http://127.0.0.1:${tokenPort}/token?service=sandboxd-test-registry&scope=repository:${repo}:pull,push`, {
        headers: { authorization: `Basic ${Buffer.from('pusher:secret').toString('base64')}` },
      });
      return `Bearer ${((await res.json()) as { token: string }).token}`;
    };
  }
  const config = join(dir, 'config.yml');
  writeFileSync(
    config,
    `version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: ${join(dir, 'storage')}
http:
  addr: 127.0.0.1:${port}
${auth}`,
  );
  const child: ChildProcess = spawn('docker-registry', ['serve', config], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (b: Buffer) => (stderr += b.toString()));
  const url = `http://127.0.0.1:${port}`;
  const stop = async () => {
    if (child.exitCode === null) {
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
    if (tokenServer) await new Promise((r) => tokenServer!.close(r));
  };
  for (let i = 0; ; i++) {
    const ok = await fetch(`${url}/v2/`).then(
      (r) => r.status === 200 || r.status === 401,
      () => false,
    );
    if (ok) break;
    if (i > 100 || child.exitCode !== null) {
      await stop();
      throw new Error(`docker-registry did not start: ${stderr}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url, pushAuth, tokenRequests, stop };
}

/** Monolithic blob upload (POST to start, PUT with the digest), as the distribution API defines. */
export async function pushBlob(reg: TestRegistry, repo: string, body: Buffer, auth?: string): Promise<{ digest: string; size: number }> {
  const digest = `sha256:${sha256(body)}`;
  const headers: Record<string, string> = auth ? { authorization: auth } : {};
  const start = await fetch(`${reg.url}/v2/${repo}/blobs/uploads/`, { method: 'POST', headers });
  if (start.status !== 202) throw new Error(`blob upload start: ${start.status} ${await start.text()}`);
  const loc = new URL(start.headers.get('location')!, reg.url);
  loc.searchParams.set('digest', digest);
  const put = await fetch(loc, { method: 'PUT', headers: { ...headers, 'content-type': 'application/octet-stream' }, body: new Uint8Array(body) });
  if (put.status !== 201) throw new Error(`blob upload: ${put.status} ${await put.text()}`);
  return { digest, size: body.length };
}

export async function pushManifest(reg: TestRegistry, repo: string, reference: string, mediaType: string, body: Buffer, auth?: string): Promise<string> {
  const res = await fetch(`${reg.url}/v2/${repo}/manifests/${reference}`, {
    method: 'PUT',
    headers: { 'content-type': mediaType, ...(auth ? { authorization: auth } : {}) },
    body: new Uint8Array(body),
  });
  if (res.status !== 201) throw new Error(`manifest push: ${res.status} ${await res.text()}`);
  return `sha256:${sha256(body)}`;
}
