// What a tenant's build steps leave for the daemon to read: their output and their files.
//
// A tenant's build steps print millions of one-character lines while the tenant holds build-log
// streams it never reads. Before the fix each line cost ~400 bytes of the daemon's heap (a promise
// chain link and an appendFile per line, and a copy per live stream): one such build grew the
// daemon by 1.5 GB, three took it past its heap limit and the whole service died.
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { agent, api, createSandbox, startServer, type TestServer } from './harness.js';

let server: TestServer;

before(async () => {
  server = await startServer({ templates: ['base'] });
});
after(async () => {
  await server?.stop();
});

function rssMb(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : 0;
}

/** An SSE request on a raw socket whose answer is never read. */
function idleStream(path: string): Socket {
  const s = connect({ host: '127.0.0.1', port: server.port });
  s.on('error', () => undefined);
  s.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nX-API-Key: ${server.apiKey}\r\nAccept: text/event-stream\r\n\r\n`);
  s.pause();
  return s;
}

describe('build logs of millions of short lines', { timeout: 600_000 }, () => {
  test('three builds printing 12 M lines each, with streams nobody reads: the daemon stays small and up, the logs are capped and streamed whole', async (t) => {
    const pid = server.pid!;
    const baseline = rssMb(pid);
    const ids: string[] = [];
    for (const n of [1, 2, 3]) {
      const res = await api(server, 'POST', '/v1/templates/build', {
        alias: `chatty-${n}`,
        skipCache: true,
        memory: 256,
        steps: [{ type: 'from', image: 'debian:11' }, { type: 'run', command: `yes x | head -c 24000000; echo chatty-${n}-done` }],
      });
      assert.equal(res.status, 202, JSON.stringify(res.body));
      ids.push(res.body.build_id);
    }
    const idle = ids.flatMap((id) => [1, 2, 3].map(() => idleStream(`/v1/templates/build/${id}/logs`)));

    let peak = baseline;
    const deadline = Date.now() + 480_000;
    const status = new Map<string, string>();
    while (Date.now() < deadline && [...status.values()].filter((s) => s !== 'building').length < ids.length) {
      assert.ok(server.pid, 'the daemon is alive');
      peak = Math.max(peak, rssMb(pid));
      assert.ok(peak - baseline < 400, `the daemon grew by ${Math.round(peak - baseline)} MB (from ${Math.round(baseline)} MB)`);
      for (const id of ids) status.set(id, (await api(server, 'GET', `/v1/templates/build/${id}/status`)).body.status);
      await new Promise((r) => setTimeout(r, 500));
    }
    assert.deepEqual([...status.values()], ['active', 'active', 'active'], 'the builds finished');
    assert.ok(peak - baseline < 400, `the daemon grew by ${Math.round(peak - baseline)} MB (from ${Math.round(baseline)} MB)`);
    t.diagnostic(`daemon RSS ${Math.round(baseline)} MB before, ${Math.round(peak)} MB at most`);
    assert.equal((await api(server, 'GET', '/health')).status, 200);

    // A client that does read gets every kept line, the cap's note and the end.
    const sse = await fetch(`${server.baseUrl}/v1/templates/build/${ids[0]}/logs`, { headers: { accept: 'text/event-stream', 'x-api-key': server.apiKey } });
    const text = await sse.text();
    const lines = text.split('\n\n').filter((e) => e.startsWith('event: log'));
    assert.ok(lines.length > 3_000_000, `${lines.length} lines streamed`);
    assert.match(text, /log reached 16 MiB; later output is not kept/);
    assert.match(text, /event: done\ndata: \{"status":"active"\}/);
    for (const s of idle) s.destroy();
    for (const n of [1, 2, 3]) await api(server, 'DELETE', `/v1/templates/chatty-${n}`);
  });
});

describe('a build step that leaves a huge directory', { timeout: 600_000 }, () => {
  test('800 000 files in one directory: the daemon sizing the layer stays small', async (t) => {
    // Before the fix the layer's size was counted with one readdir of the whole directory: ~200
    // bytes of the daemon's heap per entry (1.2 M files: +240 MB; a 125 GB disk holds 8 M inodes,
    // and three such builds at once end in a heap OOM).
    const pid = server.pid!;
    const baseline = rssMb(pid);
    const res = await api(server, 'POST', '/v1/templates/build', {
      alias: 'many-files',
      // 16 GB: ext4 gives it 1 M inodes.
      diskGB: 16,
      memory: 256,
      steps: [{ type: 'from', image: 'debian:11' }, { type: 'run', command: 'mkdir /d && cd /d && seq -f f%.0f 1 800000 | xargs touch && ls -f | wc -l' }],
    });
    assert.equal(res.status, 202, JSON.stringify(res.body));
    let peak = baseline;
    let status = 'building';
    for (let i = 0; i < 1000 && status === 'building'; i++) {
      await new Promise((r) => setTimeout(r, 500));
      peak = Math.max(peak, rssMb(pid));
      status = (await api(server, 'GET', `/v1/templates/build/${res.body.build_id}/status`)).body.status;
    }
    assert.equal(status, 'active', JSON.stringify((await api(server, 'GET', `/v1/templates/build/${res.body.build_id}/logs`)).body.logs?.slice(-600)));
    t.diagnostic(`daemon RSS ${Math.round(baseline)} MB before, ${Math.round(peak)} MB at most`);
    assert.ok(peak - baseline < 80, `the daemon grew by ${Math.round(peak - baseline)} MB`);
    const sb = await createSandbox(server, { template_name: 'many-files', timeout_seconds: 300 });
    const n = await agent(sb, 'POST', '/commands/run', { command: 'bash', args: ['-c', 'ls -f /d | wc -l'] });
    assert.equal(n.body.stdout, '800002\n', 'the layer holds every file');
    await api(server, 'DELETE', `/v1/sandboxes/${sb.id}`);
    await api(server, 'DELETE', '/v1/templates/many-files');
  });
});
