// bench/preview: a request through a preview URL against the same request made straight to the
// same server from inside the sandbox's network namespace, in the same run, by the same client
// code; and a 100 MiB download both ways.
// Goals: p50 ≤ 1 ms extra (issue 12); ≥ 400 MB/s through the preview and ≥ 0.9× straight (issue 27).
// SANDBOXD_SPLICE_MIN_BYTES=0 in the environment measures the JavaScript relay instead of the kernel's.
// Usage (root, after npm run build): node bench/dist/preview.js [SAMPLES=500]
import { spawn } from 'node:child_process';
import { agent, api, createSandbox, startServer } from '../../e2e/dist/harness.js';
import { row, summary } from './stats.js';

const SAMPLES = Number(process.argv[2] ?? 500);

/** The app: "ok" on /, 100 MiB on /big. */
const APP = `
const http = require('http');
const chunk = Buffer.alloc(1 << 20, 97);
http.createServer((req, res) => {
  if (req.url === '/big') {
    res.writeHead(200, { 'content-length': 100 * chunk.length });
    let n = 0;
    const pump = () => { while (n < 100) { n++; if (!res.write(chunk)) return res.once('drain', pump); } res.end(); };
    return pump();
  }
  res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 2 });
  res.end('ok');
}).listen(3000, '127.0.0.1');
`;

/** The client, run inside the sandbox (straight to 127.0.0.1:3000) and on the host (through the preview). */
const CLIENT = `
const http = require('http');
const [host, port, token] = process.argv.slice(-3);
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const headers = token === '-' ? {} : { 'x-sandboxd-token': token };
const get = (path) => new Promise((resolve, reject) => {
  const t0 = process.hrtime.bigint();
  http.get({ host, port: Number(port), path, agent, headers }, (r) => {
    let n = 0;
    r.on('data', (c) => (n += c.length));
    r.on('end', () => resolve({ ms: Number(process.hrtime.bigint() - t0) / 1e6, n, status: r.statusCode }));
  }).on('error', reject);
});
(async () => {
  for (let i = 0; i < 50; i++) await get('/');
  const lat = [];
  for (let i = 0; i < ${SAMPLES}; i++) {
    const r = await get('/');
    if (r.status !== 200) throw new Error('status ' + r.status);
    lat.push(r.ms);
  }
  const mbps = [];
  for (let i = 0; i < 4; i++) {
    const r = await get('/big');
    if (r.n !== 100 * 1048576) throw new Error('short download: ' + r.n);
    if (i > 0) mbps.push(r.n / 1e6 / (r.ms / 1000));
  }
  process.stdout.write(JSON.stringify({ lat, mbps }));
  agent.destroy();
})().catch((e) => { console.error(e); process.exit(1); });
`;

// No warm pool: sandboxes booting in the background would take the cores the measurement needs.
const server = await startServer({ templates: ['base', 'code-interpreter'], env: { SANDBOXD_WARM_POOL_MAX_MEMORY_MB: '0' } });
try {
  const sb = await createSandbox(server, { template_name: 'code-interpreter', internet_access: false, timeout_seconds: 900 });
  await agent(sb, 'POST', '/files/write', { path: '/workspace/app.js', content: APP });
  await agent(sb, 'POST', '/files/write', { path: '/workspace/client.js', content: CLIENT });
  await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', 'nohup node /workspace/app.js >/dev/null 2>&1 &'] });
  for (let i = 0; i < 100; i++) {
    const r = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', "curl -s http://127.0.0.1:3000/ || true"] });
    if (r.body.stdout === 'ok') break;
    await new Promise((res) => setTimeout(res, 100));
  }
  const preview = await api(server, 'GET', `/v1/sandboxes/${sb.id}/ports/3000`);
  if (preview.status !== 200) throw new Error(`preview: ${preview.status} ${JSON.stringify(preview.body)}`);
  const url = new URL(preview.body.url);

  const inside = await agent(sb, 'POST', '/commands/run', { command: 'node', args: ['/workspace/client.js', '127.0.0.1', '3000', '-'], timeout: 600 });
  if (inside.body.exit_code !== 0) throw new Error(`client inside: ${JSON.stringify(inside.body).slice(0, 500)}`);
  const direct = JSON.parse(inside.body.stdout) as { lat: number[]; mbps: number[] };

  // Not spawnSync: this process relays the daemon's log, which would block it once the pipe filled.
  const host = spawn(process.execPath, ['-e', CLIENT, '--', url.hostname, url.port, sb.authToken], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  host.stdout.on('data', (c: Buffer) => (out += c));
  host.stderr.on('data', (c: Buffer) => (err += c));
  const code = await new Promise<number | null>((resolve) => host.once('close', resolve));
  if (code !== 0) throw new Error(`client on the host: ${err}`);
  const via = JSON.parse(out) as { lat: number[]; mbps: number[] };

  const extra = summary(via.lat).p50 - summary(direct.lat).p50;
  const mbps = [...via.mbps].sort((a, b) => a - b)[Math.floor(via.mbps.length / 2)]!;
  const directMbps = [...direct.mbps].sort((a, b) => a - b)[Math.floor(direct.mbps.length / 2)]!;
  console.log(`GET / (2 bytes), keep-alive, one at a time, ${SAMPLES} samples; the same client code both ways`);
  console.log(row('straight, inside the sandbox (baseline)', direct.lat));
  console.log(row('through the preview URL (private, token)', via.lat, direct.lat));
  console.log(`extra p50: ${extra.toFixed(2)} ms (goal ≤ 1 ms: ${extra <= 1 ? 'met' : 'MISSED'})`);
  const ratio = mbps / directMbps;
  console.log(
    `100 MiB download, median of 3: straight ${directMbps.toFixed(0)} MB/s, through the preview ${mbps.toFixed(0)} MB/s = ${ratio.toFixed(2)}× (goal ≥ 400 MB/s and ≥ 0.9×: ${mbps >= 400 && ratio >= 0.9 ? 'met' : 'MISSED'})`,
  );
  await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
} finally {
  await server.stop();
}
