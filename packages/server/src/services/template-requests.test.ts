import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ServiceError } from '@sandboxd/protocol';
import { normalizeBuildRequest } from './template-requests.js';

const ok = { alias: 'my-tpl', steps: [{ type: 'from', image: 'debian:11' }, { type: 'run', command: 'echo hi' }] };

function rejects(body: unknown, re: RegExp): void {
  assert.throws(
    () => normalizeBuildRequest(body),
    (e: unknown) => e instanceof ServiceError && e.code === 'INVALID_TEMPLATE_DEFINITION' && e.toBody().error === 'Invalid template definition' && re.test(e.message),
  );
}

test('defaults of the spec: cpu 2, memory 2048, diskGB 10', () => {
  const r = normalizeBuildRequest(ok);
  assert.deepEqual([r.cpu, r.memoryMb, r.diskGb, r.skipCache, r.update], [2, 2048, 10, false, false]);
  assert.deepEqual(r.steps[1], { type: 'run', command: 'echo hi' });
});

test('every validation rule of the spec', () => {
  rejects({ steps: ok.steps }, /alias is required/);
  rejects({ ...ok, cpu: 0 }, /cpu/);
  rejects({ ...ok, cpu: 65 }, /cpu/);
  rejects({ ...ok, cpu: 1.5 }, /cpu must be an integer/);
  rejects({ ...ok, memory: 127 }, /memory/);
  rejects({ ...ok, diskGB: 0 }, /diskGB/);
  rejects({ alias: 'x' }, /steps is required/);
  rejects({ alias: 'x', steps: [] }, /first step must be a from/);
  rejects({ alias: 'x', steps: [{ type: 'run', command: 'ls' }] }, /first step must be a from/);
  rejects({ alias: 'x', steps: [{ type: 'from', image: 'fedora:39' }] }, /not allowed/);
  rejects({ alias: 'x', steps: [{ type: 'from', image: 'debian:11' }, { type: 'from', image: 'debian:11' }] }, /only the first/);
  rejects({ alias: 'x', steps: [{ type: 'from', image: 'debian:11' }, { type: 'apt', packages: [] }] }, /packages/);
  rejects({ alias: 'x', steps: [{ type: 'from', image: 'debian:11' }, { type: 'apt', packages: ['curl; rm -rf /'] }] }, /not a valid Debian package/);
  rejects({ alias: 'x', steps: [{ type: 'from', image: 'debian:11' }, { type: 'run' }] }, /command must be a string/);
  rejects({ alias: 'x', steps: [{ type: 'from', image: 'debian:11' }, { type: 'copy', dest: '/x' }] }, /needs src, file_id or file_ids/);
  rejects({ alias: 'x', steps: [{ type: 'from', image: 'debian:11' }, { type: 'copy', src: ['a'], dest: 'rel' }] }, /absolute/);
  rejects({ alias: 'x', steps: [{ type: 'from', image: 'debian:11' }, { type: 'env', key: '1A', value: 'v' }] }, /valid variable/);
  rejects({ alias: 'x', steps: [{ type: 'from', image: 'debian:11' }, { type: 'workdir', path: 'tmp' }] }, /absolute/);
  rejects({ alias: 'x', steps: [{ type: 'from', image: 'debian:11' }, { type: 'bogus' }] }, /type must be one of/);
  rejects({ alias: 'Bad Name', steps: ok.steps }, /alias/);
  rejects('nope', /JSON object/);
});

test('the newer shape real clients send', () => {
  const r = normalizeBuildRequest({
    name: 'newer',
    from_image: 'python:3.11',
    steps: [
      { type: 'RUN', args: ['pip install x'] },
      { type: 'COPY', args: ['app,lib', '/srv'], filesHash: 'abc123' },
      { type: 'ENV', args: ['A', '1'] },
      { type: 'env', key: 'B', value: '' },
      { type: 'WORKDIR', args: ['/srv'] },
      { type: 'workdir', path: '/srv/app' },
    ],
    update: true,
  });
  assert.equal(r.alias, 'newer');
  assert.equal(r.update, true);
  assert.deepEqual(r.steps.map((s) => s.type), ['from', 'run', 'copy', 'env', 'env', 'workdir', 'workdir']);
  const copy = r.steps[2] as Extract<(typeof r.steps)[number], { type: 'copy' }>;
  assert.deepEqual([copy.srcPaths, copy.dest, copy.filesHash], [['app', 'lib'], '/srv', 'abc123']);
});

test('a NUL byte in any string of a step is refused (it would reach a command line, a path or the environment)', () => {
  const from = { type: 'from', image: 'debian:11' };
  rejects({ alias: 'x', steps: [from, { type: 'run', command: 'echo a\u0000b' }] }, /steps\[1\]\.command contains a NUL byte/);
  rejects({ alias: 'x', steps: [from, { type: 'env', key: 'K', value: 'a\u0000b' }] }, /steps\[1\]\.value contains a NUL byte/);
  rejects({ alias: 'x', steps: [from, { type: 'copy', src: 'a\u0000b', dest: '/x/' }] }, /steps\[1\]\.src\[0\] contains a NUL byte/);
  rejects({ name: 'x', from_image: 'debian:11', steps: [{ type: 'RUN', args: ['true\u0000'] }] }, /NUL byte/);
  rejects({ alias: 'x', steps: [from, { type: 'workdir', path: '/a\u0000' }] }, /NUL byte/);
});
