import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { procOk } from '../runtime/proc.js';
import { getText, startEgressLab, type EgressLab } from './web-host.js';

/**
 * Servers for the tests of a hostile sandbox against its egress proxy (runtime/egress-proxy-*.test.ts).
 * They report what reached them, so a test can tell a request the proxy refused from one it let
 * through and the server ignored.
 * `web`: HTTP on 80 and HTTPS on 443 (a certificate for a.test). Answers `web:<Host headers>:<path>`;
 * /hang never, /late/<i> after 500 ms, /slow 12 bytes over 6 s. /log: the paths asked for since the
 * last /log; /conns: HTTP connections open now; /tls: TLS connections accepted; /sni: the names
 * they carried. An Upgrade it ignores, as most web servers do outside a WebSocket location: the
 * connection stays HTTP, which is what a smuggled second request would ride on.
 * `rude`: port 80 answers a status line (099) Node's own server would never write back.
 */
function serverScript(web: string, rude: string): string {
  return `
const http = require('node:http'), https = require('node:https'), net = require('node:net'), fs = require('node:fs'), tls = require('node:tls');
let seen = [], open = 0, tlsConns = 0;
const sni = [];
const answer = (req, res) => {
  if (req.url === '/log') { res.end(JSON.stringify(seen)); seen = []; return; }
  if (req.url === '/conns') return res.end(String(open));
  if (req.url === '/tls') return res.end(String(tlsConns));
  if (req.url === '/sni') return res.end(JSON.stringify(sni));
  seen.push(req.url);
  if (req.url === '/hang') return;
  if (req.url.startsWith('/late/')) return setTimeout(() => res.end('late\\n'), 500);
  if (req.url === '/slow') {
    let i = 0;
    const t = setInterval(() => { res.write('x'); if (++i === 12) { clearInterval(t); res.end('\\n'); } }, 500);
    return;
  }
  const hosts = [];
  for (let i = 0; i < req.rawHeaders.length; i += 2) if (req.rawHeaders[i].toLowerCase() === 'host') hosts.push(req.rawHeaders[i + 1]);
  res.end('web:' + hosts.join(',') + ':' + req.url + '\\n');
};
let pending = 3;
const up = () => { if (--pending === 0) process.stdout.write('ready\\n'); };
const h = http.createServer(answer);
// An ignored upgrade hands its socket back to the server (below), which must not count it twice.
const counted = new WeakSet();
h.on('connection', (s) => { if (counted.has(s)) return; counted.add(s); open++; s.on('close', () => open--); });
h.on('upgrade', (req, sock, head) => {
  const body = 'web:' + req.headers.host + ':' + req.url + '\\n';
  sock.write('HTTP/1.1 200 OK\\r\\nContent-Length: ' + body.length + '\\r\\n\\r\\n' + body);
  if (head.length) sock.unshift(head);
  h.emit('connection', sock);
});
h.listen(80, '${web}', up);
const ctx = tls.createSecureContext({ key: fs.readFileSync(process.env.KEY), cert: fs.readFileSync(process.env.CERT) });
const s = https.createServer({ key: fs.readFileSync(process.env.KEY), cert: fs.readFileSync(process.env.CERT), SNICallback: (n, cb) => { sni.push(n); cb(null, ctx); } }, answer);
s.on('connection', () => tlsConns++);
s.listen(443, '${web}', up);
net.createServer((c) => { c.on('error', () => {}); c.once('data', () => c.end('HTTP/1.1 099 X\\r\\nContent-Length: 0\\r\\n\\r\\n')); }).listen(80, '${rude}', up);
`;
}

export interface ProxyLab extends EgressLab {
  /** The paths `web` was asked for since the last call. */
  log: () => Promise<string[]>;
  /** HTTP connections open at `web` now (this question's own included). */
  conns: () => Promise<number>;
  /** TLS connections `web` has accepted. */
  tlsConns: () => Promise<number>;
  /** The server names of those connections. */
  sni: () => Promise<string[]>;
}

/** `netns`, `veth` and `link` as for startWebHost: the test file's own; `web` and `rude`: its addresses. */
export async function startProxyLab(opts: { netns: string; veth: string; link: number; web: string; rude: string; id: string; resolve: (name: string) => Promise<string[]> }): Promise<ProxyLab> {
  const dir = await mkdtemp(join(tmpdir(), 'sbx-proxy-lab-'));
  try {
    await procOk('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'web.key', '-out', 'web.pem', '-days', '2', '-subj', '/CN=a.test'], { cwd: dir });
    const lab = await startEgressLab({
      netns: opts.netns,
      veth: opts.veth,
      link: opts.link,
      addresses: [opts.web, opts.rude],
      script: serverScript(opts.web, opts.rude),
      env: { KEY: join(dir, 'web.key'), CERT: join(dir, 'web.pem') },
      id: opts.id,
      resolve: opts.resolve,
    });
    const ask = (path: string) => getText(`http://${opts.web}${path}`);
    const closeLab = lab.close;
    return Object.assign(lab, {
      log: async () => JSON.parse(await ask('/log')) as string[],
      conns: async () => Number(await ask('/conns')),
      tlsConns: async () => Number(await ask('/tls')),
      sni: async () => JSON.parse(await ask('/sni')) as string[],
      close: async () => {
        try {
          await closeLab();
        } finally {
          await rm(dir, { recursive: true, force: true });
        }
      },
    });
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}
