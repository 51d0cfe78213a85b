import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { AgentSocket, createSandbox, run, startAgentServer, stopServer, waitFor, type CreatedSandbox, type TestServer } from './agent-support.js';

// WebSocket endpoints of the agent (/execute/stream, /terminal) through the gateway.

let server: TestServer;
let sb: CreatedSandbox;

before(async () => {
  server = await startAgentServer();
  sb = await createSandbox(server, { template_name: 'code-interpreter' });
});
after(async () => {
  await stopServer(server);
});

describe('/execute/stream', () => {
  test('streams stdout/stderr as they happen, then result and complete; the socket stays open for the client to close', async () => {
    const s = await AgentSocket.open(sb, '/execute/stream');
    try {
      s.send({ type: 'execute', code: 'import sys, time\nfor i in range(3):\n    print("step", i, flush=True)\n    time.sleep(0.3)\nsys.stderr.write("warn\\n")', language: 'python', timeout: 30, workdir: '/workspace' });
      // The first line may arrive split over frames ("step 0" then "\n"): wait for all of it.
      const first = await s.next('stdout');
      while (!s.frames.filter((f) => f.type === 'stdout').map((f) => f.data).join('').includes('\n')) {
        await s.next('stdout', 30_000, s.frames.lastIndexOf(s.frames.filter((f) => f.type === 'stdout').pop()!) + 1);
      }
      assert.ok(s.frames.filter((f) => f.type === 'stdout').map((f) => f.data).join('').startsWith('step 0\n'));
      const result = await s.next('result');
      const complete = await s.next('complete');
      assert.ok(result.at - first.at >= 500, 'output came before the end, not all at once');
      assert.equal(result.exit_code, 0);
      assert.equal(typeof result.execution_time, 'number');
      assert.equal(complete.success, true);
      const out = s.frames.filter((f) => f.type === 'stdout').map((f) => f.data).join('');
      assert.equal(out, 'step 0\nstep 1\nstep 2\n');
      assert.equal(s.frames.filter((f) => f.type === 'stderr').map((f) => f.data).join(''), 'warn\n');
      for (const f of s.frames.filter((x) => x.type === 'stdout' || x.type === 'stderr')) assert.match(f.timestamp, /Z$/);
      const types = s.frames.map((f) => f.type);
      assert.ok(types.indexOf('result') < types.indexOf('complete'));
      assert.equal(types[types.length - 1], 'complete');
      await new Promise((r) => setTimeout(r, 500));
      assert.equal(s.closed, false, 'the server does not close first');
    } finally {
      await s.close();
    }
  });

  test('a complete the client may have lost (it neither closes nor writes) is repeated; a client that goes on gets none', async () => {
    const s = await AgentSocket.open(sb, '/execute/stream');
    try {
      s.send({ type: 'execute', code: 'echo once', language: 'bash' });
      const first = await s.next('complete');
      const from = s.frames.length;
      const again = await s.next('complete', 5_000, from);
      assert.equal(again.success, first.success);
      assert.ok(again.at - first.at >= 200, `repeated after ${again.at - first.at} ms`);
      assert.equal(s.frames.filter((f) => f.type === 'result').length, 1, 'only the complete is repeated');
      // Writing (the next execution) ends the repeats of the previous one.
      const next = s.frames.length;
      s.send({ type: 'execute', code: 'sleep 2; echo twice', language: 'bash' });
      await s.next('complete', 30_000, next);
      assert.equal(s.frames.slice(next).filter((f) => f.type === 'complete').length, 1, 'no stale complete during the next execution');
      assert.equal(s.frames.slice(next).filter((f) => f.type === 'stdout').map((f) => f.data).join(''), 'twice\n');
    } finally {
      await s.close();
    }
  });

  test('a chatty program: frames are coalesced and sent at least 1 ms apart, nothing lost', async () => {
    const s = await AgentSocket.open(sb, '/execute/stream');
    try {
      s.send({ type: 'execute', code: 'for i in range(20000):\n    print(i)', language: 'python' });
      await s.next('complete');
      const out = s.frames.filter((f) => f.type === 'stdout');
      assert.equal(out.map((f) => f.data).join(''), Array.from({ length: 20000 }, (_, i) => `${i}\n`).join(''));
      assert.ok(out.length < 2000, `coalesced into ${out.length} frames`);
      // The agent's send times (frame timestamps) are at least 1 ms apart. Arrival times also depend
      // on the gateway and on this process getting the CPU, so on a busy machine they are only shown.
      const sent = out.map((f) => Date.parse(f.timestamp));
      const sentGaps = sent.slice(1).map((t, i) => t - sent[i]!);
      assert.ok(sentGaps.every((g) => g >= 1), `send gaps ${sentGaps.join(',')}`);
      const arrivals = s.frames.slice(1).map((f, i) => f.at - s.frames[i]!.at);
      console.log(`# ${out.length} frames; ${arrivals.filter((g) => g < 0.5).length} arrived < 0.5 ms after the previous one`);
    } finally {
      await s.close();
    }
  });

  test('bash and exit codes; errors come as an error frame followed by complete', async () => {
    const s = await AgentSocket.open(sb, '/execute/stream');
    try {
      s.send({ type: 'execute', code: 'echo hi; exit 3', language: 'bash' });
      const result = await s.next('result');
      assert.equal(result.exit_code, 3);
      assert.equal((await s.next('complete')).success, false);
      const from = s.frames.length;
      s.send({ type: 'execute', code: 'x', language: 'cobol' });
      const err = await s.next('error', 30_000, from);
      assert.equal(err.code, 'INVALID_LANGUAGE');
      assert.equal((await s.next('complete', 30_000, from)).success, false);
    } finally {
      await s.close();
    }
  });

  test('a timeout ends the execution; closing the socket kills a running one', async () => {
    const s = await AgentSocket.open(sb, '/execute/stream');
    s.send({ type: 'execute', code: 'import time\nwhile True: time.sleep(0.1)', timeout: 1 });
    const result = await s.next('result');
    assert.equal(result.timed_out, true);
    await s.next('complete');
    const from = s.frames.length;
    s.send({ type: 'execute', code: 'import time\nprint("long", flush=True)\ntime.sleep(600)  # stream-close-marker', timeout: 900 });
    await s.next('stdout', 30_000, from);
    await s.close();
    await waitFor('the execution to be killed', async () => !/stream-close-marker/.test((await run(sb, 'ps', ['-eo', 'args'])).stdout));
  });
});

describe('/terminal', () => {
  test('an interactive shell on a pty: input, resize, output, exit code', async () => {
    const s = await AgentSocket.open(sb, '/terminal');
    try {
      s.send({ type: 'resize', cols: 123, rows: 45 });
      s.send({ type: 'input', data: 'stty size; tty; echo "hello $((6*7)) terminal"\r' });
      await waitFor('the output', async () => /hello 42 terminal/.test(s.frames.filter((f) => f.type === 'output').map((f) => f.data).join('')));
      const text = s.frames.filter((f) => f.type === 'output').map((f) => f.data).join('');
      assert.match(text, /45 123/);
      assert.match(text, /\/dev\/pts\/\d+/);
      s.send({ type: 'input', data: 'exit 7\r' });
      const exit = await s.next('exit');
      assert.equal(exit.code, 7);
    } finally {
      await s.close();
    }
  });

  test('closing the socket ends the shell and what it started', async () => {
    const s = await AgentSocket.open(sb, '/terminal');
    s.send({ type: 'input', data: 'sleep 777 & echo started\r' });
    await waitFor('the job', async () => /started/.test(s.frames.map((f) => f.data ?? '').join('')));
    await s.close();
    await waitFor('the shell and its job to end', async () => !/sleep 777/.test((await run(sb, 'ps', ['-eo', 'args'])).stdout));
  });
});

describe('/files/watch', () => {
  const changes = (s: AgentSocket) => s.frames.filter((f) => f.type === 'change').map((f) => [f.event, f.path, f.old_path, f.is_dir ? 'd' : 'f'].filter((x) => x !== undefined).join(' '));

  test('reports created, modified, renamed and deleted below the directory, new subdirectories included', async () => {
    await run(sb, 'mkdir', ['-p', '/workspace/watched']);
    const s = await AgentSocket.open(sb, '/files/watch');
    try {
      s.send({ action: 'watch', path: '/workspace/watched', ack: true });
      const ack = await s.next('watching');
      assert.equal(ack.path, '/workspace/watched');
      const script = [
        'cd /workspace/watched',
        'echo a > f',
        'mkdir -p d/e',
        'touch d/e/g',
        'mv f "f 2 ✓"',
        'rm "f 2 ✓"',
        'mv d d2',
        'echo x > d2/e/h',
        'echo outside > /workspace/not-watched',
        'touch end',
      ].join(' && ');
      assert.equal((await run(sb, 'bash', ['-c', script])).exit_code, 0);
      await waitFor('the last change', async () => changes(s).includes('created /workspace/watched/end f'));
      const got = changes(s);
      const expected = [
        'created /workspace/watched/f f',
        'modified /workspace/watched/f f',
        'created /workspace/watched/d d',
        'created /workspace/watched/d/e/g f',
        'renamed /workspace/watched/f 2 ✓ /workspace/watched/f f',
        'deleted /workspace/watched/f 2 ✓ f',
        'renamed /workspace/watched/d2 /workspace/watched/d d',
        'created /workspace/watched/d2/e/h f',
      ];
      let at = -1;
      for (const e of expected) {
        const i = got.indexOf(e, at + 1);
        assert.ok(i > at, `${e} (in order) in ${JSON.stringify(got, null, 1)}`);
        at = i;
      }
      assert.ok(!got.some((c) => c.includes('not-watched')), 'nothing outside the directory');
      for (const f of s.frames.filter((x) => x.type === 'change')) assert.match(f.timestamp, /Z$/);
    } finally {
      await s.close();
    }
  });

  test('?path= starts at once; removing the watched directory ends the watch; closing the socket ends the watcher', async () => {
    await run(sb, 'mkdir', ['-p', '/workspace/ephemeral']);
    const s = await AgentSocket.open(sb, '/files/watch?path=%2Fworkspace%2Fephemeral&ack=1');
    await s.next('watching');
    await run(sb, 'rm', ['-rf', '/workspace/ephemeral']);
    await waitFor('the socket to close', async () => s.closed);
    assert.ok(changes(s).includes('deleted /workspace/ephemeral d'));

    const t = await AgentSocket.open(sb, '/files/watch');
    t.send({ action: 'watch', path: 'watched', ack: true });
    assert.equal((await t.next('watching')).path, '/workspace/watched', 'relative paths start at /workspace');
    assert.match((await run(sb, 'ps', ['-eo', 'args'])).stdout, /sbx-helper watch \/workspace\/watched/);
    await t.close();
    await waitFor('the watcher to end', async () => !/sbx-helper watch/.test((await run(sb, 'ps', ['-eo', 'args'])).stdout));
  });

  test('without ack, every frame is a change (real clients type them so)', async () => {
    await run(sb, 'mkdir', ['-p', '/workspace/quiet']);
    const s = await AgentSocket.open(sb, '/files/watch');
    try {
      s.send({ action: 'watch', path: '/workspace/quiet' });
      await waitFor('a change', async () => {
        await run(sb, 'touch', ['/workspace/quiet/poke']);
        return s.frames.length > 0;
      });
      assert.deepEqual([...new Set(s.frames.map((f) => f.type))], ['change']);
    } finally {
      await s.close();
    }
  });

  test('limits: 32 watches per sandbox (QUOTA_EXCEEDED beyond), 8192 directories per watch (a WATCH_LIMIT warning)', async () => {
    await run(sb, 'bash', ['-c', 'mkdir -p /workspace/lim /workspace/many && cd /workspace/many && mkdir $(seq -f d%g 1 8300)']);
    const sockets: AgentSocket[] = [];
    try {
      const big = await AgentSocket.open(sb, '/files/watch');
      sockets.push(big);
      big.send({ action: 'watch', path: '/workspace/many', ack: true });
      await big.next('watching');
      const warning = await big.next('warning');
      assert.equal(warning.code, 'WATCH_LIMIT');
      // Its 8192 inotify watches go back before the small ones are made (the kernel's per-user cap).
      await sockets.shift()!.close();
      await waitFor('the big watcher to end', async () => !/sbx-helper watch \/workspace\/many/.test((await run(sb, 'ps', ['-eo', 'args'])).stdout));
      for (let i = 0; i < 32; i++) {
        const s = await AgentSocket.open(sb, '/files/watch?path=%2Fworkspace%2Flim&ack=1');
        sockets.push(s);
        await s.next('watching');
      }
      const extra = await AgentSocket.open(sb, '/files/watch?path=%2Fworkspace%2Flim&ack=1');
      sockets.push(extra);
      assert.equal((await extra.next('error')).code, 'QUOTA_EXCEEDED');
      await sockets.shift()!.close();
      await waitFor('a slot to free', async () => {
        const again = await AgentSocket.open(sb, '/files/watch?path=%2Fworkspace%2Flim&ack=1');
        sockets.push(again);
        await waitFor('an answer', async () => again.frames.length > 0);
        return again.frames[0]!.type === 'watching';
      });
    } finally {
      for (const s of sockets) await s.close();
      await run(sb, 'rm', ['-rf', '/workspace/many', '/workspace/lim']);
    }
  });

  test('a missing path, a file and a bad frame are error frames; the socket stays usable', async () => {
    await run(sb, 'bash', ['-c', 'echo x > /workspace/plain.txt']);
    const s = await AgentSocket.open(sb, '/files/watch');
    try {
      s.send({ action: 'watch', path: '/workspace/nope' });
      const e1 = await s.next('error');
      assert.equal(e1.code, 'FILE_NOT_FOUND');
      s.send({ action: 'watch', path: '/workspace/plain.txt' });
      await waitFor('a second error', async () => s.frames.filter((f) => f.type === 'error').length >= 2);
      assert.equal(s.frames.filter((f) => f.type === 'error')[1]!.code, 'NOT_A_DIRECTORY');
      s.send({ hello: 1 });
      await waitFor('a third error', async () => s.frames.filter((f) => f.type === 'error').length >= 3);
      assert.equal(s.frames.filter((f) => f.type === 'error')[2]!.code, 'VALIDATION_ERROR');
      s.send({ action: 'watch', path: '/workspace', ack: true });
      await s.next('watching');
    } finally {
      await s.close();
    }
  });
});
