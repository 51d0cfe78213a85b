import { readdir, readFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { ServiceError } from '@sandboxd/protocol';
import { proc, toolError } from './proc.js';
import { spawner, type ProcResult } from './spawner.js';

export type CrunStatus = 'created' | 'running' | 'paused' | 'stopped';

/**
 * crun with a state directory of our own (`--root`): every container in it is ours, whatever its
 * id looks like, and two runtimes (a daemon and a test) never see each other's containers.
 */
export class Crun {
  constructor(readonly root: string) {}

  args(...rest: string[]): string[] {
    return ['--root', this.root, '--cgroup-manager=cgroupfs', ...rest];
  }

  exists(id: string): boolean {
    return existsSync(`${this.root}/${id}`);
  }

  async ids(): Promise<string[]> {
    try {
      return (await readdir(this.root, { withFileTypes: true })).filter((e) => e.isDirectory()).map((e) => e.name);
    } catch {
      return [];
    }
  }

  async state(id: string): Promise<{ status: CrunStatus; pid: number } | undefined> {
    if (!this.exists(id)) return undefined;
    const r = await proc('crun', this.args('state', id));
    if (r.code !== 0) {
      if (!this.exists(id)) return undefined;
      throw toolError('crun state', [id], r);
    }
    const s = JSON.parse(r.stdout) as { status: CrunStatus; pid: number };
    return { status: s.status, pid: s.pid };
  }

  /** Every container's state from one `crun list` (not one `crun state` per container). */
  async states(): Promise<Map<string, { status: CrunStatus; pid: number }>> {
    const out = new Map<string, { status: CrunStatus; pid: number }>();
    if (!existsSync(this.root)) return out;
    const r = await proc('crun', this.args('list', '--format=json'));
    if (r.code !== 0) throw toolError('crun list', [], r);
    for (const c of JSON.parse(r.stdout || '[]') as Array<{ id: string; status: CrunStatus; pid: number }>) out.set(c.id, { status: c.status, pid: c.pid });
    return out;
  }

  /**
   * `crun run -d` with a new listening unix socket as fd 3 inside (made at `listen.tmp`, renamed to
   * `listen.path`; see spawner-child.ts). A detached container inherits crun's stdio, so all three
   * are /dev/null (a pipe would never see EOF); crun's own errors go to `logFile`.
   */
  runDetached(id: string, bundle: string, logFile: string, listen: { tmp: string; path: string }): Promise<void> {
    const args = ['--log', `file:${logFile}`, ...this.args('run', '-d', '--preserve-fds', '1', '--bundle', bundle, id)];
    return spawner.run('crun', args, { listen }).then(async ({ code }) => {
      if (code === 0) return;
      let why = '';
      try {
        why = (await readFile(logFile, 'utf8')).trim().split('\n').slice(-3).join(' | ');
      } catch {
        /* no log */
      }
      throw new ServiceError('RUNTIME_ERROR', `the container of sandbox ${id} did not start; try again`).withDetail(`crun run exited ${code}: ${why}`);
    });
  }

  async simple(cmd: 'pause' | 'resume', id: string): Promise<void> {
    const r = await proc('crun', this.args(cmd, id));
    if (r.code !== 0) throw toolError(`crun ${cmd}`, [id], r);
  }

  /** Kills every process of the container (thawing it if frozen) and removes it. */
  async forceDelete(id: string): Promise<void> {
    if (!this.exists(id)) return;
    const r = await proc('crun', this.args('delete', '-f', id));
    if (r.code !== 0 && this.exists(id)) throw toolError('crun delete', [id], r);
  }

  async kill(id: string, signal = 'KILL'): Promise<ProcResult> {
    return proc('crun', this.args('kill', '--all', id, signal));
  }

  /** Exec'd processes get no_new_privs like init (crun does not inherit it from config.json). */
  async exec(id: string, argv: string[], opts: { env?: Record<string, string>; cwd?: string; input?: string } = {}): Promise<ProcResult> {
    const extra: string[] = ['--no-new-privs'];
    for (const [k, v] of Object.entries(opts.env ?? {})) extra.push('--env', `${k}=${v}`);
    if (opts.cwd) extra.push('--cwd', opts.cwd);
    return proc('crun', this.args('exec', ...extra, id, ...argv), { input: opts.input });
  }
}
