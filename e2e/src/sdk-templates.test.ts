import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConflictError, NotFoundError, Template, TemplateBuildError, type BuildLogEntry, type BuildStatus, type TemplateDefinition } from '@sandboxd/sdk';
import { startServer, type TestServer } from './harness.js';
import { clientFor, SandboxPool, sbx, describeResult } from './sdk-support.js';

/** A base image the server can provide here (from Debian's mirror). */
export const FROM_IMAGE = process.env.SANDBOXD_E2E_FROM_IMAGE ?? 'debian:11';

let server: TestServer;
let pool: SandboxPool;
let ctxDir: string;
const alias = `sdk-e2e-${randomBytes(3).toString('hex')}`;

before(async () => {
  server = await startServer();
  pool = new SandboxPool(clientFor(server));
  ctxDir = await mkdtemp(join(tmpdir(), 'sdk-tpl-'));
  await mkdir(join(ctxDir, 'app/data'), { recursive: true });
  await writeFile(join(ctxDir, 'app/main.py'), 'print("hello from the template")\n');
  await writeFile(join(ctxDir, 'app/data/x.txt'), 'x-data\n');
  await writeFile(join(ctxDir, 'config.txt'), 'config=1\n');
});
after(async () => {
  await pool?.cleanup();
  await server?.stop();
  if (ctxDir) await rm(ctxDir, { recursive: true, force: true });
});

function definition(name: string, extra: TemplateDefinition['steps'] = []): TemplateDefinition {
  return {
    alias: name,
    cpu: 1,
    memory: 512,
    diskGB: 2,
    steps: [
      { type: 'from', image: FROM_IMAGE },
      { type: 'run', command: 'echo "built at step 2" > /built.txt && echo building-now' },
      { type: 'copy', src: 'app', dest: '/app' },
      { type: 'copy', src: ['config.txt'], dest: '/etc/myconfig.txt' },
      { type: 'env', key: 'GREETING', value: 'hi from env' },
      { type: 'workdir', path: '/app' },
      ...extra,
    ],
  };
}

describe('SDK: template builds', () => {
  test('build with live logs and progress, then use, list, and delete the template', async () => {
    const logs: BuildLogEntry[] = [];
    const progress: BuildStatus[] = [];
    // Files uploaded beforehand are named by file_id (the spec's form), next to the SDK's own packing of `src`.
    await writeFile(join(ctxDir, 'uploaded.txt'), 'uploaded by id\n');
    const [uploaded] = await Template.uploadFiles(['uploaded.txt'], { client: clientFor(server), contextDir: ctxDir });
    assert.match(uploaded!.fileId, /\S/);
    assert.equal(uploaded!.path, 'uploaded.txt');
    const result = await Template.build(definition(alias, [{ type: 'copy', file_id: uploaded!.fileId, dest: '/opt/by-id.txt' }]), {
      client: clientFor(server),
      contextDir: ctxDir,
      onLog: (e) => logs.push(e),
      onProgress: (s) => progress.push(s),
      pollIntervalMs: 500,
    });
    assert.equal(result.status, 'active');
    assert.match(result.buildId, /\S/);
    assert.equal(result.template?.name, alias);
    assert.ok(logs.length > 0, 'logs streamed');
    assert.ok(logs.some((l) => l.message.includes('building-now')), JSON.stringify(logs.slice(-20)));
    assert.ok(progress.length > 0);
    assert.equal(progress[progress.length - 1]!.status, 'active');

    const status = await Template.buildStatus(result.buildId, { client: clientFor(server) });
    assert.equal(status.status, 'active');
    assert.equal(status.progress, 100);
    const chunk = await Template.logs(result.buildId, { client: clientFor(server), offset: 0 });
    assert.ok(chunk.logs.includes('building-now'));
    const replay: string[] = [];
    for await (const e of Template.followLogs(result.buildId, { client: clientFor(server) })) replay.push(e.message);
    assert.ok(replay.some((m) => m.includes('building-now')), 'followLogs of a finished build replays and ends');

    assert.ok((await Template.list({ client: clientFor(server) })).some((t) => t.name === alias));
    const sb = await pool.create({ template: alias });
    assert.equal(sb.info.resources.vcpu, 1);
    assert.equal(sb.info.resources.memoryMb, 512);
    const r = await sb.commands.run('cat /built.txt /app/main.py /app/data/x.txt /etc/myconfig.txt /opt/by-id.txt; echo "$GREETING"');
    assert.equal(r.stdout, 'built at step 2\nprint("hello from the template")\nx-data\nconfig=1\nuploaded by id\nhi from env\n', r.stderr);

    await assert.rejects(Template.build(definition(alias), { client: clientFor(server), contextDir: ctxDir }), (e: unknown) => e instanceof ConflictError && e.code === 'TEMPLATE_EXISTS');
    await assert.rejects(Template.delete(alias, { client: clientFor(server) }), (e: unknown) => e instanceof ConflictError && e.code === 'TEMPLATE_IN_USE');
    await sb.kill();
    assert.equal((await Template.delete(alias, { client: clientFor(server) })).status, 'deleted');
    await assert.rejects(Template.get(alias, { client: clientFor(server) }), NotFoundError);
  });

  test('a failing step fails the build with TemplateBuildError carrying the log tail', async () => {
    const name = `${alias}-fail`;
    await assert.rejects(
      Template.build(definition(name, [{ type: 'run', command: 'echo about-to-fail; exit 3' }]), { client: clientFor(server), contextDir: ctxDir, pollIntervalMs: 500 }),
      (e: unknown) => {
        assert.ok(e instanceof TemplateBuildError, String(e));
        assert.ok(e.logs.some((l) => l.includes('about-to-fail')), JSON.stringify(e.logs));
        assert.match(e.buildId, /\S/);
        return true;
      },
    );
  });

  test('a missing local copy source is refused before anything is uploaded', async () => {
    await assert.rejects(
      Template.build({ alias: `${alias}-x`, steps: [{ type: 'from', image: FROM_IMAGE }, { type: 'copy', src: 'nope/', dest: '/x' }] }, { client: clientFor(server), contextDir: ctxDir }),
      /copy source nope\/ not found/,
    );
  });
});

describe('CLI: template build, logs, ls, rm', () => {
  test('sbx template build -f shows logs and ends active; sbx logs replays; --json output; rm', async () => {
    const name = `${alias}-cli`;
    const file = join(ctxDir, 'template.json');
    await writeFile(file, JSON.stringify(definition(name)));
    const built = await sbx(server, ['template', 'build', '-f', file], { timeoutMs: 900_000 });
    assert.equal(built.code, 0, describeResult(built));
    assert.match(built.stdout, /building-now/);
    assert.match(built.stderr, new RegExp(`template ${name} is active`));

    const ls = await sbx(server, ['template', 'ls', '--json']);
    assert.equal(ls.code, 0, describeResult(ls));
    const entry = (JSON.parse(ls.stdout) as Array<{ name: string; buildId: string }>).find((t) => t.name === name);
    assert.ok(entry?.buildId, ls.stdout);
    const human = await sbx(server, ['template', 'ls']);
    assert.match(human.stdout, /^NAME\s+STATUS\s+LANGUAGE/);
    assert.ok(human.stdout.includes(name));

    const logs = await sbx(server, ['logs', entry.buildId]);
    assert.equal(logs.code, 0, describeResult(logs));
    assert.match(logs.stdout, /building-now/);
    const jsonLogs = await sbx(server, ['logs', entry.buildId, '--json']);
    assert.ok(jsonLogs.stdout.trim().split('\n').every((l) => typeof JSON.parse(l).message === 'string'));

    const failing = join(ctxDir, 'failing.json');
    await writeFile(failing, JSON.stringify(definition(`${name}-bad`, [{ type: 'run', command: 'echo cli-about-to-fail; exit 9' }])));
    const bad = await sbx(server, ['template', 'build', '-f', failing, '--json'], { timeoutMs: 900_000 });
    assert.equal(bad.code, 1, describeResult(bad));
    const err = JSON.parse(bad.stderr.trim().split('\n').pop()!);
    assert.equal(err.error.code, 'BUILD_FAILED');

    const rmr = await sbx(server, ['template', 'rm', name]);
    assert.equal(rmr.code, 0, describeResult(rmr));
    const gone = await sbx(server, ['template', 'get', name]);
    assert.equal(gone.code, 1);
    assert.match(gone.stderr, /TEMPLATE_NOT_FOUND/);
  });
});
