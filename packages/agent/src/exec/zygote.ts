import { spawn, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { logLine } from '../log.js';

/** A warm Python is stopped after this long without use (its memory counts against the sandbox). */
const IDLE_MS = 10 * 60 * 1000;
/** A Python that cannot keep a zygote up (too old, broken) is not asked again for this long. */
const RETRY_AFTER_FAILURE_MS = 5 * 60 * 1000;
const MAX_ZYGOTES = 2;

/** Env that Python reads once at start-up: a zygote serves only runs that agree on all of it. */
function startupKey(python: string, env: Record<string, string>): string {
  const keys = Object.keys(env)
    .filter((k) => (k.startsWith('PYTHON') && k !== 'PYTHONUNBUFFERED') || k === 'LANG' || k === 'LANGUAGE' || k.startsWith('LC_') || k === 'HOME' || k === 'TZ')
    .sort();
  const h = createHash('sha256').update(python);
  for (const k of keys) h.update(`\0${k}=${env[k]}`);
  return h.digest('hex').slice(0, 16);
}

interface Zygote {
  key: string;
  socket: string;
  child: ChildProcess;
  startedAt: number;
  lastUsed: number;
  idle: NodeJS.Timeout;
}

/**
 * Warm Pythons (sbx_zygote.py) that fork a process per execution instead of starting an interpreter:
 * ~5 ms instead of 15-20 ms for print(1) in an image with many packages. A run goes through
 * `sbx-helper zrun SOCKET -- python3 sbx_run.py ...`; when the zygote is not (yet) listening the
 * helper simply runs that argv cold, so a zygote is an optimisation, never a dependency.
 */
export class PythonZygotes {
  private zygotes = new Map<string, Zygote>();
  private failedUntil = new Map<string, number>();

  constructor(
    private readonly runDir: string,
    private readonly agentDir: string,
    private readonly cwd: string,
  ) {
    // Sockets of an earlier agent (restart, stop/start) lead nowhere now.
    try {
      mkdirSync(runDir, { recursive: true });
      for (const n of readdirSync(runDir)) if (n.startsWith('pyz-')) rmSync(join(runDir, n), { force: true });
    } catch (err) {
      logLine(`python zygotes: ${(err as Error).message}`);
    }
  }

  /** The socket to hand to `sbx-helper zrun` for this run; starts a zygote when there is none. */
  socketFor(python: string, env: Record<string, string>): string | null {
    const key = startupKey(python, env);
    const z = this.zygotes.get(key);
    if (z) {
      z.lastUsed = Date.now();
      z.idle.refresh();
      return z.socket;
    }
    if ((this.failedUntil.get(key) ?? 0) > Date.now()) return null;
    this.start(key, python, env);
    return this.zygotes.get(key)?.socket ?? null;
  }

  stopAll(): void {
    for (const z of [...this.zygotes.values()]) this.stop(z);
  }

  private start(key: string, python: string, env: Record<string, string>): void {
    if (this.zygotes.size >= MAX_ZYGOTES) {
      const oldest = [...this.zygotes.values()].sort((a, b) => a.lastUsed - b.lastUsed)[0]!;
      this.stop(oldest);
    }
    const socket = join(this.runDir, `pyz-${key}.sock`);
    rmSync(socket, { force: true });
    // Only the start-up part of the first run's env stays in the zygote; each run brings its own.
    const child = spawn(python, [join(this.agentDir, 'sbx_zygote.py'), socket, join(this.agentDir, 'sbx_run.py')], {
      cwd: this.cwd,
      env,
      stdio: ['ignore', 'ignore', 'pipe'],
      detached: true,
    });
    let stderr = '';
    child.stderr!.on('data', (c: Buffer) => {
      stderr = (stderr + c.toString()).slice(-2000);
    });
    child.on('error', () => undefined);
    const z: Zygote = { key, socket, child, startedAt: Date.now(), lastUsed: Date.now(), idle: setTimeout(() => this.stop(z), IDLE_MS) };
    z.idle.unref();
    child.on('exit', (code, signal) => {
      if (this.zygotes.get(key) === z) this.zygotes.delete(key);
      clearTimeout(z.idle);
      rmSync(socket, { force: true });
      if (Date.now() - z.startedAt < 5000 && signal !== 'SIGTERM') {
        this.failedUntil.set(key, Date.now() + RETRY_AFTER_FAILURE_MS);
        logLine(`python zygote for ${python} exited at once (${code ?? signal}); running Python cold: ${stderr.trim()}`);
      }
    });
    this.zygotes.set(key, z);
  }

  private stop(z: Zygote): void {
    this.zygotes.delete(z.key);
    clearTimeout(z.idle);
    try {
      z.child.kill('SIGTERM');
    } catch {
      // already gone
    }
  }
}
