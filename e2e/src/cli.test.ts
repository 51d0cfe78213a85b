import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { mkdir, mkdtemp, readFile, readlink, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, startServer, type TestServer } from './harness.js';
import { describeResult, sbx } from './sdk-support.js';

let server: TestServer;
let tmp: string;
const created: string[] = [];

before(async () => {
  server = await startServer();
  tmp = await mkdtemp(join(tmpdir(), 'cli-e2e-'));
});
after(async () => {
  for (const id of created) await sbx(server, ['rm', id]).catch(() => undefined);
  await server?.stop();
  if (tmp) await rm(tmp, { recursive: true, force: true });
});

async function newSandbox(...args: string[]): Promise<string> {
  const r = await sbx(server, ['create', '-q', '--template', 'base', '--timeout', '30m', ...args]);
  assert.equal(r.code, 0, describeResult(r));
  const id = r.stdout.trim();
  assert.match(id, /^\S+$/);
  created.push(id);
  return id;
}

async function sha256File(path: string): Promise<string> {
  const h = createHash('sha256');
  for await (const c of createReadStream(path)) h.update(c as Buffer);
  return h.digest('hex');
}

describe('CLI: sandboxes', () => {
  test('create, ls, get, pause, resume, stop, start, timeout, rm — human and --json output', async () => {
    const c = await sbx(server, ['create', '--template', 'base', '--timeout', '20m', '--env', 'A=1', '--no-internet', '--json']);
    assert.equal(c.code, 0, describeResult(c));
    const info = JSON.parse(c.stdout);
    created.push(info.id);
    assert.equal(info.status, 'running');
    assert.equal(info.templateName, 'base');
    assert.equal(info.internetAccess, false);
    assert.equal(info.timeoutSeconds, 1200);
    assert.ok(!('authToken' in info) && !c.stdout.includes('auth_token'), 'tokens are not printed');

    const ls = await sbx(server, ['ls']);
    assert.equal(ls.code, 0, describeResult(ls));
    assert.match(ls.stdout, /^ID\s+STATUS\s+TEMPLATE\s+CREATED\s+EXPIRES\n/);
    assert.match(ls.stdout, new RegExp(`${info.id}\\s+running\\s+base`));
    const lsJson = JSON.parse((await sbx(server, ['ls', '--json'])).stdout) as Array<{ id: string }>;
    assert.ok(lsJson.some((s) => s.id === info.id));
    const lsQ = await sbx(server, ['ls', '-q']);
    assert.ok(lsQ.stdout.split('\n').includes(info.id));

    const get = await sbx(server, ['get', info.id]);
    assert.match(get.stdout, new RegExp(`id:\\s+${info.id}`));
    assert.match(get.stdout, /status:\s+running/);
    assert.match(get.stdout, /internet:\s+no/);

    for (const [verb, status] of [['pause', 'paused'], ['resume', 'running'], ['stop', 'stopped'], ['start', 'running']] as const) {
      const r = await sbx(server, [verb, info.id]);
      assert.equal(r.code, 0, `${verb}: ${describeResult(r)}`);
      assert.equal(r.stdout, `${info.id} ${verb === 'resume' ? 'resumed' : verb === 'start' ? 'started' : status}\n`);
      assert.equal(JSON.parse((await sbx(server, ['get', info.id, '--json'])).stdout).status, status);
    }
    const pj = await sbx(server, ['pause', info.id, '--json']);
    assert.deepEqual(JSON.parse(pj.stdout), { id: info.id, status: 'paused' });
    const again = await sbx(server, ['pause', info.id]);
    assert.equal(again.code, 1, 'pausing a paused sandbox is an invalid state');
    assert.match(again.stderr, /INVALID_STATE|409/);
    assert.equal((await sbx(server, ['resume', info.id])).code, 0);

    const t = await sbx(server, ['timeout', info.id, '1h', '--json']);
    assert.equal(t.code, 0, describeResult(t));
    assert.equal(JSON.parse(t.stdout).timeoutSeconds, 3600);

    const rmr = await sbx(server, ['rm', info.id]);
    assert.equal(rmr.code, 0, describeResult(rmr));
    assert.equal(rmr.stdout, `${info.id} deleted\n`);
    const gone = await sbx(server, ['get', info.id]);
    assert.equal(gone.code, 1);
  });

  test('several ids at once; one failure makes the exit status 1 but the others still happen', async () => {
    const a = await newSandbox();
    const b = await newSandbox();
    const r = await sbx(server, ['pause', a, 'sb_missing', b]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /sb_missing/);
    assert.match(r.stdout, new RegExp(`${a} paused\\n${b} paused`));
  });
});

describe('CLI: errors and usage', () => {
  test('API errors: message, code, status, request id, a hint, exit 1; --json puts JSON on stderr', async () => {
    const r = await sbx(server, ['get', 'sb_missing']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^sbx: error: .+ \(NOT_FOUND, HTTP 404, request \S+\)\nhint: List sandboxes with `sbx ls`\.\n$/);
    assert.equal(r.stdout, '');
    const j = await sbx(server, ['get', 'sb_missing', '--json']);
    assert.equal(j.code, 1);
    const body = JSON.parse(j.stderr);
    assert.equal(body.error.code, 'NOT_FOUND');
    assert.equal(body.error.status, 404);
    assert.match(body.error.request_id, /\S/);
  });

  test('a bad key, no key, and no server each say what to fix', async () => {
    const bad = await sbx(server, ['ls'], { env: { SANDBOXD_API_KEY: 'sbd_wrong' } });
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /AUTHENTICATION_ERROR/);
    assert.match(bad.stderr, /hint: Check the API key/);
    const none = await sbx(server, ['ls'], { env: { SANDBOXD_API_KEY: undefined } });
    assert.equal(none.code, 1);
    assert.match(none.stderr, /hint: No API key set/);
    const port = await freePort();
    const down = await sbx(undefined, ['ls', '--api-url', `http://127.0.0.1:${port}`, '--api-key', 'x']);
    assert.equal(down.code, 1);
    assert.match(down.stderr, /CONNECTION_ERROR/);
    assert.match(down.stderr, new RegExp(`Is sandboxd running at http://127.0.0.1:${port}\\?`));
    const flag = await sbx(undefined, ['ls', '--api-url', server.baseUrl, '--api-key', server.apiKey, '--json']);
    assert.equal(flag.code, 0, 'flags work without the environment');
  });

  test('usage errors exit 2 and point to --help; --help exits 0', async () => {
    for (const args of [['frob'], ['get'], ['exec', 'x'], ['cp', 'a', 'b'], ['create', '--timeout', 'soon'], ['create', '--bogus'], ['env', 'x', 'set', 'NOEQUALS']]) {
      const r = await sbx(server, args);
      assert.equal(r.code, 2, `${args.join(' ')}: ${describeResult(r)}`);
      assert.match(r.stderr, /Run 'sbx .*--help' for usage\./);
    }
    const h = await sbx(undefined, ['cp', '--help']);
    assert.equal(h.code, 0);
    assert.match(h.stdout, /^Usage: sbx cp SOURCE DEST/);
  });
});

describe('CLI: exec, run, shell', () => {
  let id: string;
  before(async () => {
    id = await newSandbox();
  });

  test('exec streams output as it happens and exits with the command status', async () => {
    const r = await sbx(server, ['exec', id, '--', 'sh', '-c', 'echo early; sleep 2; echo late >&2; exit 7']);
    assert.equal(r.code, 7, describeResult(r));
    assert.equal(r.stdout, 'early\n');
    assert.equal(r.stderr, 'late\n');
    assert.ok(r.firstStdoutMs !== undefined && r.durationMs - r.firstStdoutMs >= 1500, `first output at ${r.firstStdoutMs} ms of ${r.durationMs} ms`);
    const line = await sbx(server, ['exec', id, '--', 'echo $((6 * 7)) | tr 4 X']);
    assert.equal(line.stdout, 'X2\n');
    const argv = await sbx(server, ['exec', id, '--', 'printf', '%s|', 'a b', '$HOME']);
    assert.equal(argv.stdout, 'a b|$HOME|');
    const env = await sbx(server, ['exec', id, '-e', 'N=v', '-w', '/tmp', '--', 'echo $N $(pwd)']);
    assert.equal(env.stdout, 'v /tmp\n');
    const plain = await sbx(server, ['exec', id, '--no-stream', '--', 'echo plain; exit 3']);
    assert.equal(plain.code, 3);
    assert.equal(plain.stdout, 'plain\n');
    const j = await sbx(server, ['exec', id, '--json', '--', 'echo json; exit 4']);
    assert.equal(j.code, 4);
    const parsed = JSON.parse(j.stdout);
    assert.equal(parsed.stdout, 'json\n');
    assert.equal(parsed.exitCode, 4);
    const to = await sbx(server, ['exec', id, '--timeout', '1', '--', 'sleep 20']);
    assert.equal(to.code, 124, describeResult(to));
  });

  test('exec -i passes stdin to the command; without -i the command reads nothing', async () => {
    const with_ = await sbx(server, ['exec', '-i', id, '--', 'tr a-z A-Z'], { input: 'piped in\n' });
    assert.equal(with_.code, 0, describeResult(with_));
    assert.equal(with_.stdout, 'PIPED IN\n');
    const without = await sbx(server, ['exec', id, '--', 'cat'], { input: 'ignored\n' });
    assert.equal(without.code, 0, describeResult(without));
    assert.equal(without.stdout, '');
  });

  test('run takes code from a file (language from its extension) or stdin', async () => {
    const file = join(tmp, 'script.sh');
    await writeFile(file, 'echo "from file $((1 + 1))"\nexit 3\n');
    const r = await sbx(server, ['run', id, file]);
    assert.equal(r.code, 3, describeResult(r));
    assert.equal(r.stdout, 'from file 2\n');
    const stdin = await sbx(server, ['run', id, '-', '--language', 'bash'], { input: 'echo from-stdin\n' });
    assert.equal(stdin.code, 0, describeResult(stdin));
    assert.equal(stdin.stdout, 'from-stdin\n');
    const missing = await sbx(server, ['run', id, join(tmp, 'nope.py')]);
    assert.equal(missing.code, 2);
  });

  test('repl keeps state between entries (blocks end at an empty line); run --context uses the same context', async () => {
    const py = await newSandbox('--template', 'code-interpreter');
    const r = await sbx(server, ['repl', py], { input: 'x = 41\nx + 1\ndef f():\n    return x * 2\n\nf()\nprint("out", x)\nundefined_name\n' });
    assert.equal(r.stdout, '42\n82\nout 41\n', describeResult(r));
    assert.match(r.stderr, /NameError/);
    assert.equal(r.code, 1, 'the last entry failed');
    const ctx = /context (ctx_\w+)/.exec(r.stderr)?.[1];
    assert.ok(ctx, r.stderr);
    assert.equal((await sbx(server, ['run', py, '-', '--context', ctx], { input: 'print(x)\n' })).stdout, '41\n', "the repl's context");
    const contexts = await sbx(server, ['run', py, '-', '--isolated'], { input: 'print("x" in dir())\n' });
    assert.equal(contexts.stdout, 'False\n', describeResult(contexts));
    const inDefault = await sbx(server, ['run', py, '-'], { input: 'y = 1\n' });
    assert.equal(inDefault.code, 0, describeResult(inDefault));
    assert.equal((await sbx(server, ['run', py, '-'], { input: 'print(y)\n' })).stdout, '1\n', 'sbx run uses the default context');
    await sbx(server, ['rm', py]);
  });

  test("stats shows the sandbox's cpu, memory, disk and network; --json the whole record; an unknown id fails", async () => {
    const r = await sbx(server, ['stats', id]);
    assert.equal(r.code, 0, describeResult(r));
    for (const k of ['status:', 'cpu:', 'memory:', 'disk:', 'network:', 'processes:', 'oom kills:']) assert.match(r.stdout, new RegExp(`^${k}`, 'm'), k);
    assert.match(r.stdout, /^memory:\s+[\d.]+ (KiB|MiB) of [\d.]+ (MiB|GiB) \(/m);
    const j = await sbx(server, ['stats', id, '--json']);
    const rec = JSON.parse(j.stdout);
    assert.equal(rec.sandboxId, id);
    assert.ok(rec.memory.usedBytes > 0 && rec.pids >= 2, j.stdout);
    const missing = await sbx(server, ['stats', 'sbnosuchsandbox']);
    assert.notEqual(missing.code, 0);
  });

  test('shell: piped input runs in a terminal, exit status passes through', async () => {
    const r = await sbx(server, ['shell', id], { input: 'echo "tty: $(tty | cut -c1-8)"\necho "sum $((40 + 2))"\nexit 3\n' });
    assert.equal(r.code, 3, describeResult(r));
    assert.match(r.stdout, /sum 42/);
    assert.match(r.stdout, /tty: \/dev\/pts/);
  });

  test('env: list, set, get, rm; values reach exec', async () => {
    const set = await sbx(server, ['env', id, 'set', 'ALPHA=1', 'BETA=two words']);
    assert.equal(set.code, 0, describeResult(set));
    assert.match(set.stdout, /^ALPHA=1$/m);
    assert.equal((await sbx(server, ['env', id, 'get', 'BETA'])).stdout, 'two words\n');
    assert.equal((await sbx(server, ['exec', id, '--', 'echo "$ALPHA-$BETA"'])).stdout, '1-two words\n');
    const rmr = await sbx(server, ['env', id, 'rm', 'ALPHA', '--json']);
    const vars = JSON.parse(rmr.stdout);
    assert.equal(vars.ALPHA, undefined);
    assert.equal(vars.BETA, 'two words');
    const missing = await sbx(server, ['env', id, 'get', 'ALPHA']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /ALPHA is not set/);
  });

  test('a paused sandbox: exec fails with a hint to resume', async () => {
    const p = await newSandbox();
    assert.equal((await sbx(server, ['pause', p])).code, 0);
    const r = await sbx(server, ['exec', p, '--', 'true']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /SANDBOX_PAUSED/);
    assert.match(r.stderr, /sbx resume/);
  });
});

describe('CLI: cp', () => {
  test('a 200 MB file up and down, streamed, byte for byte', async () => {
    const id = await newSandbox();
    const local = join(tmp, 'big.bin');
    const block = randomBytes(4 * 1024 * 1024);
    await writeFile(local, Buffer.concat(Array.from({ length: 50 }, (_, i) => (i % 5 === 0 ? randomBytes(4 * 1024 * 1024) : block))));
    const want = await sha256File(local);
    const up = await sbx(server, ['cp', local, `${id}:/workspace/`, '--json'], { timeoutMs: 600_000 });
    assert.equal(up.code, 0, describeResult(up));
    assert.deepEqual(JSON.parse(up.stdout), { source: local, destination: `${id}:/workspace/big.bin`, bytes: 200 * 1024 * 1024 });
    const inside = await sbx(server, ['exec', id, '--', 'sha256sum /workspace/big.bin']);
    assert.equal(inside.stdout.split(' ')[0], want);
    const back = join(tmp, 'big.back');
    const down = await sbx(server, ['cp', `${id}:/workspace/big.bin`, back], { timeoutMs: 600_000 });
    assert.equal(down.code, 0, describeResult(down));
    assert.equal(down.stdout, '');
    assert.equal(await sha256File(back), want);
    await rm(local);
    await rm(back);
  });

  test('stdin and stdout, directory destinations, and a missing remote file', async () => {
    const id = await newSandbox();
    const up = await sbx(server, ['cp', '-', `${id}:/workspace/in.txt`], { input: 'piped\n' });
    assert.equal(up.code, 0, describeResult(up));
    const out = await sbx(server, ['cp', `${id}:/workspace/in.txt`, '-']);
    assert.equal(out.stdout, 'piped\n');
    const toDir = await sbx(server, ['cp', `${id}:/workspace/in.txt`, tmp + '/']);
    assert.equal(toDir.code, 0, describeResult(toDir));
    assert.equal(await readFile(join(tmp, 'in.txt'), 'utf8'), 'piped\n');
    const missing = await sbx(server, ['cp', `${id}:/workspace/none.txt`, join(tmp, 'none.txt')]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /FILE_NOT_FOUND/);
    await assert.rejects(readFile(join(tmp, 'none.txt')), /ENOENT/);
    const dirOut = await sbx(server, ['cp', `${id}:/workspace`, '-']);
    assert.equal(dirOut.code, 2);
    assert.match(dirOut.stderr, /is a directory/);
  });

  test('directories both ways: nested files, modes, symlinks, odd names; into an existing directory or as a new name', async () => {
    const id = await newSandbox();
    const src = join(tmp, 'proj');
    await mkdir(join(src, 'src/deep/er'), { recursive: true });
    await writeFile(join(src, 'src/main.py'), 'print("hi")\n');
    await writeFile(join(src, 'run.sh'), '#!/bin/sh\necho run\n', { mode: 0o755 });
    await writeFile(join(src, 'src/deep/er/ünï cödé.txt'), 'u');
    await writeFile(join(src, 'big.bin'), randomBytes(3 * 1024 * 1024));
    await symlink('src/main.py', join(src, 'link.py'));

    const up = await sbx(server, ['cp', src, `${id}:/workspace/`]);
    assert.equal(up.code, 0, describeResult(up));
    const inside = await sbx(server, ['exec', id, '--', 'cd /workspace/proj && ./run.sh && readlink link.py && cat "src/deep/er/ünï cödé.txt" && sha256sum big.bin']);
    assert.equal(inside.code, 0, describeResult(inside));
    const localSha = createHash('sha256').update(await readFile(join(src, 'big.bin'))).digest('hex');
    assert.equal(inside.stdout, `run\nsrc/main.py\nu${localSha}  big.bin\n`);
    const renamed = await sbx(server, ['cp', src, `${id}:/workspace/copy2`]);
    assert.equal(renamed.code, 0, describeResult(renamed));
    assert.equal((await sbx(server, ['exec', id, '--', 'cat /workspace/copy2/src/main.py'])).stdout, 'print("hi")\n');

    const back = join(tmp, 'back');
    const down = await sbx(server, ['cp', `${id}:/workspace/proj`, back]);
    assert.equal(down.code, 0, describeResult(down));
    assert.equal(await readFile(join(back, 'src/main.py'), 'utf8'), 'print("hi")\n');
    assert.equal((await stat(join(back, 'run.sh'))).mode & 0o777, 0o755);
    assert.equal(await readlink(join(back, 'link.py')), 'src/main.py');
    assert.equal(await readFile(join(back, 'src/deep/er/ünï cödé.txt'), 'utf8'), 'u');
    assert.equal(createHash('sha256').update(await readFile(join(back, 'big.bin'))).digest('hex'), localSha);
    const existing = join(tmp, 'existing');
    await mkdir(existing);
    const into = await sbx(server, ['cp', '--json', `${id}:/workspace/proj/src`, existing]);
    assert.equal(into.code, 0, describeResult(into));
    assert.equal(JSON.parse(into.stdout).files, 2);
    assert.equal(await readFile(join(existing, 'src/main.py'), 'utf8'), 'print("hi")\n');
    assert.equal((await sbx(server, ['exec', id, '--', 'ls -A /tmp | grep -c sbx- || true'])).stdout, '0\n', 'no staging archive left in the sandbox');

    const missing = await sbx(server, ['cp', `${id}:/workspace/nope/`, join(tmp, 'nope')]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /FILE_NOT_FOUND/);
  });

  test('watch prints changes as they happen and ends when the directory is removed', async () => {
    const id = await newSandbox();
    assert.equal((await sbx(server, ['exec', id, '--', 'mkdir -p /workspace/cw'])).code, 0);
    const watching = sbx(server, ['watch', id, '/workspace/cw'], { timeoutMs: 60_000 });
    const changes = await sbx(server, ['exec', id, '--', 'for i in $(seq 1 80); do touch /workspace/cw/f$i; sleep 0.1; done; rm -rf /workspace/cw']);
    assert.equal(changes.code, 0, describeResult(changes));
    const r = await watching;
    assert.equal(r.code, 0, describeResult(r));
    assert.match(r.stderr, /^watching \/workspace\/cw/);
    const lines = r.stdout.trim().split('\n');
    assert.match(lines.find((l) => l.startsWith('created'))!, /^created +\/workspace\/cw\/f\d+$/);
    assert.match(lines[lines.length - 1]!, /^deleted +\/workspace\/cw\/$/);
    const missing = await sbx(server, ['watch', id, '/workspace/cw']);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /FILE_NOT_FOUND/);
  });
});
