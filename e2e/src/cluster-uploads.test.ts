// Two control replicas on one PostgreSQL, each with a data directory of its own, as behind a load
// balancer: the upload link asked of one, the PUT sent to the other, the build started on the
// first (its COPY step reads the file the other received), its log followed live through the
// second, and read whole through the second after the first has stopped.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { request, type IncomingMessage } from 'node:http';
import { after, before, describe, test } from 'node:test';
import { testClusterKeyFiles } from '../../packages/server/dist/testing/cluster-keys.js';
import { startPostgres, type TestPostgres } from '../../packages/server/dist/testing/postgres.js';
import { api, startServer, stopAll, type TestServer } from './harness.js';

/** Server-sent events of a stream, as they come. */
function sse(url: string, apiKey: string): Promise<{ events: Array<{ event: string; data: any }>; close: () => void }> {
  return new Promise((resolve, reject) => {
    const events: Array<{ event: string; data: any }> = [];
    const req = request(url, { headers: { 'x-api-key': apiKey, accept: 'text/event-stream' } }, (res: IncomingMessage) => {
      if (res.statusCode !== 200) return reject(new Error(`build logs: ${res.statusCode}`));
      let buf = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => {
        buf += c;
        for (let i = buf.indexOf('\n\n'); i >= 0; i = buf.indexOf('\n\n')) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          const event = /^event: (.*)$/m.exec(block)?.[1];
          const data = /^data: (.*)$/m.exec(block)?.[1];
          if (event && data) events.push({ event, data: JSON.parse(data) });
        }
      });
      res.on('error', () => undefined);
      resolve({ events, close: () => req.destroy() });
    });
    req.on('error', reject);
    req.end();
  });
}

async function put(server: TestServer, path: string, body: Buffer): Promise<{ status: number; body: any }> {
  const res = await fetch(`${server.baseUrl}${path}`, { method: 'PUT', headers: { 'content-type': 'application/octet-stream' }, body: new Uint8Array(body) });
  return { status: res.status, body: await res.json() };
}

describe('uploads and build logs through two control replicas', { timeout: 900_000 }, () => {
  let pg: TestPostgres;
  let a: TestServer;
  let b: TestServer;
  const keys = testClusterKeyFiles();

  before(async () => {
    pg = await startPostgres();
    const env = { SANDBOXD_DATABASE_URL: await pg.createDatabase(), SANDBOXD_CLUSTER_SIGNING_KEY_FILE: keys.signingKeyFile, SANDBOXD_WARM_POOL_MAX_MEMORY_MB: '0' };
    a = await startServer({ command: 'control', templates: ['base'], env });
    b = await startServer({ command: 'control', templates: ['base'], env });
  });

  after(async () => {
    await stopAll(
      () => a?.stop(),
      () => b?.stop(),
      () => pg?.stop(),
      () => keys.remove(),
    );
  });

  test('link of one, PUT to the other, build on the first copying it, log live and afterwards through the second', async () => {
    const marker = `uploaded-${randomBytes(4).toString('hex')}`;
    const file = Buffer.from(`${marker}\n`);
    const hash = createHash('sha256').update(file).digest('hex');
    const link = await api(a, 'POST', '/v1/templates/files/upload-link', { files: [{ path: 'marker.txt', size: file.length, hash: `sha256:${hash}` }] });
    assert.equal(link.status, 200, JSON.stringify(link.body));
    const path = new URL(link.body.upload_urls[0].upload_url).pathname;
    // A tampered claim is refused by the other replica too; the real one is taken.
    const [payload, mac] = path.split('/').pop()!.split('.');
    const forged = path.replace(payload!, Buffer.from(JSON.stringify({ ...JSON.parse(Buffer.from(payload!, 'base64url').toString()), s: 3 })).toString('base64url'));
    assert.equal((await put(b, forged, Buffer.from('abc'))).status, 403, mac);
    const ok = await put(b, path, file);
    assert.equal(ok.status, 200, JSON.stringify(ok.body));

    const started = await api(a, 'POST', '/v1/templates/build', {
      alias: `shared-${randomBytes(3).toString('hex')}`,
      cpu: 1,
      memory: 256,
      diskGB: 1,
      steps: [
        { type: 'from', image: 'debian:11' },
        { type: 'copy', dest: '/opt', file_id: `f_${hash}` },
        { type: 'run', command: 'cat /opt/marker.txt; for i in $(seq 1 300); do echo "line $i"; done; sleep 2; echo after-the-pause' },
      ],
    });
    assert.equal(started.status, 202, JSON.stringify(started.body));
    const buildId = started.body.build_id as string;
    const stream = await sse(`${b.baseUrl}/v1/templates/build/${buildId}/logs`, a.apiKey);
    try {
      for (const deadline = Date.now() + 900_000; !stream.events.some((e) => e.event === 'done'); await new Promise((r) => setTimeout(r, 200))) {
        assert.ok(Date.now() < deadline, `the build did not end; control A's log:\n${readFileSync(a.logFile, 'utf8').slice(-3000)}`);
      }
    } finally {
      stream.close();
    }
    const messages = stream.events.filter((e) => e.event === 'log').map((e) => e.data.message as string);
    assert.deepEqual(stream.events.at(-1), { event: 'done', data: { status: 'active' } }, messages.slice(-10).join('\n'));
    // A step's output is indented under the step's own lines.
    const output = messages.map((m) => m.trim());
    assert.ok(output.includes(marker), `the step printed the file B received:\n${messages.slice(0, 12).join('\n')}`);
    assert.equal(output.filter((m) => /^line \d+$/.test(m)).length, 300);
    assert.ok(output.indexOf('line 300') < output.indexOf('after-the-pause'));

    // A stops; its build's log is still there, whole, through B, from any offset.
    await a.shutdown();
    const whole = await api(b, 'GET', `/v1/templates/build/${buildId}/logs`);
    assert.equal(whole.body.complete, true);
    assert.deepEqual((whole.body.logs as string).split('\n').filter(Boolean), messages);
    const from = Buffer.byteLength((whole.body.logs as string).slice(0, (whole.body.logs as string).indexOf('line 150')));
    const rest = await api(b, 'GET', `/v1/templates/build/${buildId}/logs?offset=${from}`);
    assert.match(rest.body.logs, /^line 150\n/);
    const past = await api(b, 'GET', `/v1/templates/build/${buildId}/logs?offset=${whole.body.offset + 10}`);
    assert.equal(past.body.logs, '');
    assert.equal(past.body.offset, whole.body.offset);
  });
});
