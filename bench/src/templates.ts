// bench/templates: a cold build and a fully cached rebuild of a template with one apt step, one run
// step and a 50 MB copy, end to end through the API; then sandbox creation from that custom template
// next to the built-in it is based on. Usage (root, after npm run build): node bench/dist/templates.js [N=15]
import { createHash, randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { api, startServer, type TestServer } from '../../e2e/dist/harness.js';
import { row, summary } from './stats.js';

const N = Number(process.argv[2] ?? 15);

async function buildAndWait(server: TestServer, body: Record<string, unknown>): Promise<{ ms: number; status: any }> {
  const t0 = performance.now();
  const res = await api(server, 'POST', '/v1/templates/build', body);
  if (res.status !== 202) throw new Error(`build: ${res.status} ${JSON.stringify(res.body)}`);
  for (;;) {
    const st = await api(server, 'GET', `/v1/templates/build/${res.body.build_id}/status`);
    if (st.body.status !== 'building') return { ms: performance.now() - t0, status: st.body };
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function createTimes(server: TestServer, template: string, n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const res = await api(server, 'POST', '/v1/sandboxes', { template_name: template, internet_access: false });
    out.push(performance.now() - t0);
    if (res.status !== 201) throw new Error(`create: ${res.status} ${JSON.stringify(res.body)}`);
    await api(server, 'DELETE', `/v1/sandboxes/${res.body.id}`);
  }
  return out;
}

async function main(): Promise<void> {
  const server = await startServer({ templates: ['python'], env: { SANDBOXD_BUILDS_PER_HOUR: '100', SANDBOXD_REGISTRY_URL: 'none' } });
  try {
    const blob = randomBytes(50 * 1024 * 1024);
    const hash = createHash('sha256').update(blob).digest('hex');
    const t0 = performance.now();
    const link = await api(server, 'POST', '/v1/templates/files/upload-link', { files: [{ path: 'blob.bin', size: blob.length, hash: `sha256:${hash}` }] });
    const put = await fetch(link.body.upload_urls[0].upload_url, { method: 'PUT', body: new Uint8Array(blob), headers: { 'content-type': 'application/octet-stream' } });
    if (!put.ok) throw new Error(`upload: ${put.status}`);
    const uploadMs = performance.now() - t0;
    const marker = randomBytes(4).toString('hex');
    const steps = [
      { type: 'from', image: 'python:3.11' },
      { type: 'apt', packages: ['jq'] },
      { type: 'run', command: `echo ${marker} > /opt/marker && pip --version > /opt/pip` },
      { type: 'copy', file_id: link.body.upload_urls[0].file_id, dest: '/opt/blob.bin' },
    ];
    // skipCache: every step really runs (apt-get, the run step, the 50 MB copy).
    const cold = await buildAndWait(server, { alias: 'bench', cpu: 1, memory: 1024, diskGB: 5, steps, skipCache: true });
    if (cold.status.status !== 'active') throw new Error(`cold build: ${JSON.stringify(cold.status)}`);
    const cached: number[] = [];
    for (let i = 0; i < 5; i++) {
      const again = await buildAndWait(server, { alias: 'bench', cpu: 1, memory: 1024, diskGB: 5, steps, update: true });
      if (again.status.status !== 'active') throw new Error(`cached build: ${JSON.stringify(again.status)}`);
      cached.push(again.ms);
    }
    const custom = await createTimes(server, 'bench', N);
    const builtin = await createTimes(server, 'python', N);
    // Without the warm pool every create boots, so the template's layer count shows.
    await server.shutdown();
    server.env.SANDBOXD_WARM_POOL_SIZE = '0';
    await server.restart();
    const customCold = await createTimes(server, 'bench', N);
    const builtinCold = await createTimes(server, 'python', N);

    console.log(`\nbench/templates on ${new Date().toISOString()}`);
    console.log(`50 MB upload (link + PUT)           ${uploadMs.toFixed(0)} ms`);
    console.log(`cold build (apt, run, 50 MB copy)   ${(cold.ms / 1000).toFixed(1)} s (skipCache: every step runs; the python:3.11 base is cached)`);
    console.log(row('fully cached rebuild', cached));
    console.log(row('create from the custom template', custom, builtin));
    console.log(row('create from built-in python', builtin));
    console.log(row('cold create, custom template', customCold, builtinCold));
    console.log(row('cold create, built-in python', builtinCold));
    const ratio = summary(custom).p50 / summary(builtin).p50;
    const ratioCold = summary(customCold).p50 / summary(builtinCold).p50;
    console.log(`targets: cached rebuild ≤ 1.5 s (p50 ${(summary(cached).p50 / 1000).toFixed(2)} s); custom create within 10 % of built-in (warm ${((ratio - 1) * 100).toFixed(1)} %, cold ${((ratioCold - 1) * 100).toFixed(1)} %)`);
  } finally {
    await server.stop();
  }
}

await main();
