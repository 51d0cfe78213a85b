// The spawner process (see spawner.ts): runs host tools for the daemon and reports how they ended.
// It stays small, so that each fork(2) it makes costs little; it holds no state of its own.
import { spawn } from 'node:child_process';
import { chmodSync, renameSync } from 'node:fs';
import { createServer } from 'node:net';
import type { SpawnReply, SpawnRequest } from './spawner.js';

const reply = (msg: SpawnReply) => process.send?.(msg);

function errorOf(id: number, err: unknown): SpawnReply {
  const e = err as NodeJS.ErrnoException;
  return { id, error: { message: e?.message ?? String(err), code: e?.code } };
}

/** Collects stdout/stderr and the exit of a tool, feeding it `input` on stdin. */
function run(req: SpawnRequest): void {
  let child;
  try {
    child = spawn(req.cmd, req.args, { cwd: req.cwd, stdio: ['pipe', 'pipe', 'pipe'] });
  } catch (err) {
    reply(errorOf(req.id, err));
    return;
  }
  let stdout = '';
  let stderr = '';
  child.stdout.setEncoding('utf8').on('data', (c: string) => (stdout += c));
  child.stderr.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  let failed = false;
  child.on('error', (err) => {
    failed = true;
    reply(errorOf(req.id, err));
  });
  child.on('close', (code, signal) => {
    if (!failed) reply({ id: req.id, result: { code, signal, stdout, stderr } });
  });
  child.stdin.on('error', () => undefined);
  child.stdin.end(req.input ?? '');
}

/**
 * A detached tool (crun run -d) given a listening unix socket as fd 3, made here at `listen.tmp`,
 * mode 0600, renamed to `listen.path` once the tool holds it; this process's copy is closed before
 * any event-loop turn, so it never accepts a connection meant for the container.
 */
function runWithListener(req: SpawnRequest & { listen: NonNullable<SpawnRequest['listen']> }): void {
  const server = createServer();
  server.on('error', () => undefined);
  let child;
  try {
    server.listen(req.listen.tmp);
    const fd = (server as unknown as { _handle?: { fd?: number } })._handle?.fd;
    if (typeof fd !== 'number' || fd < 0) throw new Error(`cannot create the socket ${req.listen.tmp}`);
    chmodSync(req.listen.tmp, 0o600);
    child = spawn(req.cmd, req.args, { stdio: ['ignore', 'ignore', 'ignore', fd] });
    renameSync(req.listen.tmp, req.listen.path);
  } catch (err) {
    reply(errorOf(req.id, err));
    return;
  } finally {
    server.close();
  }
  let failed = false;
  child.on('error', (err) => {
    failed = true;
    reply(errorOf(req.id, err));
  });
  child.on('close', (code, signal) => {
    if (!failed) reply({ id: req.id, result: { code, signal, stdout: '', stderr: '' } });
  });
}

process.on('message', (req: SpawnRequest) => {
  if (req.listen) runWithListener(req as SpawnRequest & { listen: NonNullable<SpawnRequest['listen']> });
  else run(req);
});
// The daemon is gone (also by SIGKILL): nothing is left to report to.
process.on('disconnect', () => process.exit(0));
