// Run by sdk-node18.test.ts under Debian's Node 18 (not by the test runner): drives a real sandbox
// through @sandboxd/sdk with SANDBOXD_API_URL / SANDBOXD_API_KEY from the environment, and prints
// one JSON line of what it saw. The test checks it; anything thrown exits 1 with the stack.
import { createHash, randomBytes } from 'node:crypto';
import { NotFoundError, Sandbox } from '@sandboxd/sdk';

const out: Record<string, unknown> = { node: process.version };
const sandbox = await Sandbox.create({ template: 'code-interpreter', timeoutSeconds: 300, envVars: { FROM_CREATE: 'yes' } });
try {
  const plain = await sandbox.runCode('import os\nprint(6 * 7, os.environ["FROM_CREATE"])');
  out.runCode = plain.stdout;

  const chunks: string[] = [];
  const streamed = await sandbox.runCode('import time\nfor i in range(3):\n    print("tick", i, flush=True)\n    time.sleep(0.2)', { onStdout: (d) => chunks.push(d) });
  out.streamed = { stdout: streamed.stdout, callbacks: chunks.length, joined: chunks.join('') };

  const cmd = await sandbox.commands.run('echo "cmd ok"; exit 3');
  out.command = { stdout: cmd.stdout, exitCode: cmd.exitCode };

  const data = randomBytes(3 * 1024 * 1024);
  await sandbox.files.upload('/workspace/blob.bin', data);
  const back = await sandbox.files.download('/workspace/blob.bin');
  out.files = {
    same: createHash('sha256').update(data).digest('hex') === createHash('sha256').update(back).digest('hex'),
    list: (await sandbox.files.list('/workspace')).map((f) => f.name).filter((n) => n === 'blob.bin'),
  };
  try {
    await sandbox.files.read('/workspace/missing.txt');
    out.notFound = 'no error';
  } catch (err) {
    out.notFound = err instanceof NotFoundError ? err.code : String(err);
  }

  await sandbox.env.set('FROM_SDK', 'v18');
  out.env = (await sandbox.commands.run('echo $FROM_SDK')).stdout;

  const watcher = await sandbox.files.watch('/workspace');
  await sandbox.files.write('/workspace/watched.txt', 'w');
  for await (const change of watcher) {
    if (change.path === '/workspace/watched.txt') {
      out.watch = change.event;
      break;
    }
  }

  const term = await sandbox.terminal();
  term.write('echo "term $((2 + 3))"; exit 4\r');
  out.terminal = { text: /term 5/.test(await term.waitFor('term 5')), exit: await term.exited };

  out.metrics = typeof (await sandbox.metrics()).uptimeSeconds;
  await sandbox.pause();
  await sandbox.resume();
  out.afterResume = (await sandbox.runCode('print("back")')).stdout;
} finally {
  await sandbox.kill();
}
out.killed = true;
console.log(JSON.stringify(out));
