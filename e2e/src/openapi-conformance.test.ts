import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { AgentSocket, agent, api, createSandbox, startAgentServer, stopServer, waitFor, type CreatedSandbox, type TestServer } from './agent-support.js';
import type { ApiResponse } from './harness.js';
import { documentedSuccess, examplesOf, sseEvents, validator } from '../../packages/server/dist/testing/openapi-check.js';

// Issue 14, item 6: the OpenAPI document tells the truth. Its request examples are sent as they
// are to a real daemon and real sandboxes, and every answer (bodies, server-sent events, WebSocket
// frames) must validate against the schema the document gives it, with nothing undocumented in it.
// The routes that need no sandbox are also checked in-process by http/openapi.test.ts.

let server: TestServer;
let doc: any;
let sb: CreatedSandbox;
const check = validator({ closed: true });

before(async () => {
  server = await startAgentServer();
  doc = (await api(server, 'GET', '/openapi.json')).body;
});
after(async () => {
  await stopServer(server);
});

/** Asserts that an answer is a documented success of `METHOD path` whose body validates; returns the body. */
function conforms(method: string, path: string, res: ApiResponse): any {
  const r = documentedSuccess(doc, method, path, res.status);
  const type = (res.headers.get('content-type') ?? '').split(';')[0]!;
  const media = r.content[type] ?? r.content['*/*'];
  assert.ok(media, `${method} ${path}: ${type} is not a documented type of its ${res.status} (${Object.keys(r.content).join(', ')})`);
  check(media.schema, res.body, `${method} ${path} (${res.status})`);
  return res.body;
}

/** The JSON request examples the document gives an operation. */
function requestExamples(method: string, path: string): Record<string, unknown>[] {
  const examples = examplesOf(doc.paths[path][method.toLowerCase()].requestBody.content['application/json']) as Record<string, unknown>[];
  assert.ok(examples.length > 0, `${method} ${path} has request examples`);
  return examples;
}

/** Reads a server-sent events stream until `enough` holds (or `ms` pass); returns what came. */
async function readEvents(res: Response, enough: (events: Array<{ event: string; data: string }>) => boolean, ms = 20_000): Promise<string> {
  const reader = res.body!.getReader();
  const deadline = Date.now() + ms;
  let text = '';
  while (Date.now() < deadline && !enough(sseEvents(text.slice(0, text.lastIndexOf('\n\n') + 2)))) {
    const chunk = await Promise.race([reader.read(), new Promise<{ done: true; value: undefined }>((r) => setTimeout(() => r({ done: true, value: undefined }), Math.max(0, deadline - Date.now())))]);
    if (chunk.done) break;
    text += Buffer.from(chunk.value).toString();
  }
  await reader.cancel().catch(() => undefined);
  return text.slice(0, text.lastIndexOf('\n\n') + 2);
}

/** Asserts every event of a stream's text against the document's x-events of that operation. */
function eventsConform(method: string, path: string, text: string): Array<{ event: string; data: any }> {
  const events = documentedSuccess(doc, method, path, 200).content['text/event-stream']['x-events'];
  return sseEvents(text).map((e) => {
    assert.ok(events[e.event], `${path}: event ${e.event} is not documented`);
    const data = JSON.parse(e.data);
    check(events[e.event], data, `${method} ${path} event ${e.event}`);
    return { event: e.event, data };
  });
}

describe('the lifecycle API answers as documented', () => {
  test('create with the documented example; get, list, events, metrics and their streams; pause, resume, stop, start, delete', async () => {
    for (const body of requestExamples('POST', '/v1/sandboxes')) {
      const created = await api(server, 'POST', '/v1/sandboxes', body);
      conforms('POST', '/v1/sandboxes', created);
      sb = { id: created.body.id, publicHost: created.body.public_host, authToken: created.body.auth_token, body: created.body };
    }
    assert.match(sb.id, /^sb[a-z0-9]{20}$/, 'the examples show ids as the service makes them');
    conforms('GET', '/v1/sandboxes/{id}', await api(server, 'GET', `/v1/sandboxes/${sb.id}`));
    conforms('GET', '/v1/sandboxes', await api(server, 'GET', '/v1/sandboxes?limit=1'));
    conforms('GET', '/v1/sandboxes/{id}/metrics', await api(server, 'GET', `/v1/sandboxes/${sb.id}/metrics`));
    conforms('GET', '/v1/account', await api(server, 'GET', '/v1/account'));
    const prometheus = await api(server, 'GET', '/metrics');
    conforms('GET', '/metrics', prometheus);
    assert.match(prometheus.body, /^# HELP sandboxd_/m);

    const other = await createSandbox(server, { template_name: 'base', timeout_seconds: 600 });
    const stream = await fetch(`${server.baseUrl}/v1/sandboxes/${other.id}/events`, { headers: { 'x-api-key': server.apiKey } });
    assert.equal(stream.status, 200);
    const seen = readEvents(stream, (events) => events.some((e) => e.event === 'started'));
    for (const action of ['pause', 'resume', 'stop', 'start']) {
      conforms('POST', `/v1/sandboxes/{id}/${action}`, await api(server, 'POST', `/v1/sandboxes/${other.id}/${action}`));
    }
    const kinds = eventsConform('GET', '/v1/sandboxes/{id}/events', await seen).map((e) => e.event);
    assert.deepEqual(kinds, ['paused', 'resumed', 'stopped', 'started']);

    const token = conforms('POST', '/v1/events/token', await api(server, 'POST', '/v1/events/token', { sandbox_id: other.id })).token as string;
    const metrics = await fetch(`${server.baseUrl}/v1/sandboxes/${other.id}/metrics/stream?interval=1&token=${encodeURIComponent(token)}`);
    assert.equal(metrics.status, 200);
    const samples = eventsConform('GET', '/v1/sandboxes/{id}/metrics/stream', await readEvents(metrics, (events) => events.length >= 1));
    assert.equal(samples[0]?.event, 'metrics');

    conforms('PUT', '/v1/sandboxes/{id}/timeout', await api(server, 'PUT', `/v1/sandboxes/${other.id}/timeout`, requestExamples('PUT', '/v1/sandboxes/{id}/timeout')[0]));
    conforms('POST', '/v1/sandboxes/{id}/token/refresh', await api(server, 'POST', `/v1/sandboxes/${other.id}/token/refresh`));
    conforms('DELETE', '/v1/sandboxes/{id}', await api(server, 'DELETE', `/v1/sandboxes/${other.id}`));
  });
});

describe('snapshots answer as documented', () => {
  test('snapshot, list, get, create from it, fork, restore, promote and delete with the documented examples', async () => {
    const src = await createSandbox(server, { template_name: 'base', timeout_seconds: 600 });
    const snap = conforms('POST', '/v1/sandboxes/{id}/snapshots', await api(server, 'POST', `/v1/sandboxes/${src.id}/snapshots`, requestExamples('POST', '/v1/sandboxes/{id}/snapshots')[0]));
    conforms('GET', '/v1/snapshots', await api(server, 'GET', '/v1/snapshots?limit=1'));
    conforms('GET', '/v1/snapshots/{id}', await api(server, 'GET', `/v1/snapshots/${snap.snapshot_id}`));
    const made = conforms('POST', '/v1/sandboxes', await api(server, 'POST', '/v1/sandboxes', { snapshot_id: snap.snapshot_id, timeout_seconds: 600 }));
    const forks = conforms('POST', '/v1/sandboxes/{id}/fork', await api(server, 'POST', `/v1/sandboxes/${src.id}/fork`, requestExamples('POST', '/v1/sandboxes/{id}/fork')[0]));
    assert.equal(forks.data.length, 2);
    conforms('POST', '/v1/sandboxes/{id}/restore', await api(server, 'POST', `/v1/sandboxes/${made.id}/restore`, { ...requestExamples('POST', '/v1/sandboxes/{id}/restore')[0], snapshot_id: snap.snapshot_id }));
    const alias = requestExamples('POST', '/v1/snapshots/{id}/template')[0]!;
    const tpl = conforms('POST', '/v1/snapshots/{id}/template', await api(server, 'POST', `/v1/snapshots/${snap.snapshot_id}/template`, alias));
    conforms('GET', '/v1/account/limits', await api(server, 'GET', '/v1/account/limits'));
    for (const s of [made.id, src.id, ...forks.data.map((f: any) => f.id)]) await api(server, 'DELETE', `/v1/sandboxes/${s}`);
    await api(server, 'DELETE', `/v1/templates/${tpl.id}`);
    conforms('DELETE', '/v1/snapshots/{id}', await api(server, 'DELETE', `/v1/snapshots/${snap.snapshot_id}`));
  });
});

describe('the agent API answers as documented', () => {
  const at = (p: string) => `/agent${p}`;
  const call = async (method: string, path: string, url = path, body?: unknown) => conforms(method, at(path), await agent(sb, method, url, body));

  test('the documented request examples are accepted, and every answer matches its schema', async () => {
    assert.ok(sb, 'the lifecycle test created the sandbox');
    for (const path of ['/health', '/info', '/system', '/processes', '/cache/stats', '/env']) await call('GET', path);
    for (const [method, path] of [
      ['POST', '/execute'],
      ['POST', '/execute/rich'],
      ['POST', '/execute/ipython'],
      ['POST', '/commands/run'],
      ['POST', '/files/write'],
      ['POST', '/files/mkdir'],
      ['PUT', '/env'],
      ['PATCH', '/env'],
    ] as const) {
      for (const body of requestExamples(method, at(path))) await call(method, path, path, body);
    }
    const rich = await call('POST', '/execute/rich', '/execute/rich', requestExamples('POST', at('/execute/rich'))[0]);
    assert.equal(rich.rich_outputs?.[0]?.type, 'image', 'the rich example makes a figure');
    await call('DELETE', '/env/{key}', '/env/DEBUG');

    await call('GET', '/files/read', '/files/read?path=/workspace/hello.py');
    await call('GET', '/files/list', '/files/list?path=/workspace');
    await call('GET', '/files/exists', '/files/exists?path=/workspace/hello.py');
    await call('GET', '/files/exists', '/files/exists?path=/workspace/nope.txt');
    await call('DELETE', '/files/remove', '/files/remove?path=/workspace/out');
    const form = new FormData();
    form.append('path', '/workspace/data/');
    form.append('file', new Blob(['a,b\n1,2\n']), 'sales.csv');
    const upload = await fetch(`${sb.publicHost}/files/upload`, { method: 'POST', headers: { authorization: `Bearer ${sb.authToken}` }, body: form });
    conforms('POST', at('/files/upload'), { status: upload.status, headers: upload.headers, body: await upload.json() });
    const download = await fetch(`${sb.publicHost}/files/download?path=/workspace/hello.py`, { headers: { authorization: `Bearer ${sb.authToken}` } });
    conforms('GET', at('/files/download'), { status: download.status, headers: download.headers, body: await download.text() });
    const ranged = await fetch(`${sb.publicHost}/files/download?path=/workspace/hello.py`, { headers: { authorization: `Bearer ${sb.authToken}`, range: 'bytes=0-4' } });
    conforms('GET', at('/files/download'), { status: ranged.status, headers: ranged.headers, body: await ranged.text() });

    const bg = await call('POST', '/execute/background', '/execute/background', requestExamples('POST', at('/execute/background'))[0]);
    const cmd = await call('POST', '/commands/background', '/commands/background', requestExamples('POST', at('/commands/background'))[0]);
    const cb = await call('POST', '/execute/async', '/execute/async', requestExamples('POST', at('/execute/async'))[0]);
    await waitFor('the async execution to end', async () => (await agent(sb, 'GET', '/execute/processes')).body.processes.find((p: any) => p.process_id === cb.process_id && p.status !== 'running'), 60_000);
    const listed = await call('GET', '/execute/processes');
    assert.ok(listed.processes.some((p: any) => p.callback), 'a process with its callback delivery is listed (and documented)');
    await call('POST', '/execute/kill/{process_id}', `/execute/kill/${bg.process_id}`);
    await call('DELETE', '/execute/kill', `/execute/kill?process_id=${cmd.process_id}`);
    await call('POST', '/cache/clear');
    const snapshot = await call('GET', '/metrics/snapshot');
    assert.ok(Object.keys(snapshot.requests_total).length > 0);
  });

  test('the WebSocket operations send the documented frames', async () => {
    const frames = (path: string) => documentedSuccess(doc, 'GET', at(path), 101)['x-websocket'];
    const framesOf = (s: AgentSocket) => s.frames.map(({ at: _at, ...f }) => f);

    const streamDoc = frames('/execute/stream');
    const stream = await AgentSocket.open(sb, '/execute/stream');
    for (const example of examplesOf(streamDoc.client)) {
      check(streamDoc.client.schema, example, 'execute stream client example');
      stream.send(example as Record<string, unknown>);
    }
    await stream.next('complete');
    await stream.close();
    for (const f of framesOf(stream)) check(streamDoc.server.schema, f, `execute stream frame ${f.type}`);
    assert.ok(stream.frames.some((f) => f.type === 'stdout') && stream.frames.some((f) => f.type === 'result'));

    const watchDoc = frames('/files/watch');
    const watch = await AgentSocket.open(sb, '/files/watch');
    watch.send(examplesOf(watchDoc.client)[0] as Record<string, unknown>);
    await watch.next('watching');
    await agent(sb, 'POST', '/files/write', { path: '/workspace/watched.txt', content: 'x' });
    await watch.next('change');
    await watch.close();
    for (const f of framesOf(watch)) check(watchDoc.server.schema, f, `watch frame ${f.type}`);

    const termDoc = frames('/terminal');
    const term = await AgentSocket.open(sb, '/terminal?cols=100&rows=30');
    for (const example of examplesOf(termDoc.client)) check(termDoc.client.schema, example, 'terminal client example');
    term.send({ type: 'resize', cols: 120, rows: 40 });
    term.send({ type: 'input', data: 'echo hi; exit\r' });
    await term.next('exit');
    await term.close();
    for (const f of framesOf(term)) check(termDoc.server.schema, f, `terminal frame ${f.type}`);
  });
});
