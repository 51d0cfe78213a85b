import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** How a host tool ended: the helper's answer and proc()'s (proc.ts runs tools through the helper, so the type is defined here). */
export interface ProcResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

export interface SpawnRequest {
  id: number;
  cmd: string;
  args: string[];
  cwd?: string;
  input?: string;
  /** Run detached (stdio /dev/null) with a new listening unix socket as fd 3: see spawner-child. */
  listen?: { tmp: string; path: string };
}

export type SpawnReply = { id: number; result: ProcResult } | { id: number; error: { message: string; code?: string } };

/**
 * Runs the runtime's host tools (crun, mount, umount, mkfs, rm, ...) from a small helper process.
 * Node forks (libuv's fork(2), synchronous, on the event loop) in time proportional to the
 * forking process's memory: ~1 ms from a fresh process, 10–25 ms from a daemon holding a thousand
 * sandboxes' state, and a create runs about eight tools. The helper keeps every fork cheap and the
 * daemon's event loop free; a request costs one message each way.
 *
 * The helper is started on first use and again after it died (its requests in flight fail).
 */
export class Spawner {
  private child?: ChildProcess;
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (r: ProcResult) => void; reject: (e: Error) => void }>();

  constructor(private readonly script = fileURLToPath(new URL('./spawner-child.js', import.meta.url))) {}

  run(cmd: string, args: string[], opts: { cwd?: string; input?: string; listen?: SpawnRequest['listen'] } = {}): Promise<ProcResult> {
    const child = this.helper();
    const id = this.nextId++;
    return new Promise<ProcResult>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      // A pending request keeps the process alive, an idle helper does not.
      if (this.pending.size === 1) this.hold(child, true);
      const req: SpawnRequest = { id, cmd, args, ...opts };
      child.send(req, (err) => {
        if (err) this.settle(id, undefined, err);
      });
    });
  }

  /** The helper's pid (tests). */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  private helper(): ChildProcess {
    if (this.child) return this.child;
    // No inherited node flags (--cpu-prof, --inspect, the test runner's, NODE_OPTIONS): a plain helper.
    const env = { ...process.env };
    delete env.NODE_OPTIONS;
    const child = fork(this.script, [], { execArgv: [], env, serialization: 'json', stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    child.on('message', (msg: SpawnReply) => {
      if ('error' in msg) this.settle(msg.id, undefined, Object.assign(new Error(msg.error.message), { code: msg.error.code }));
      else this.settle(msg.id, msg.result);
    });
    const gone = (why: string) => {
      if (this.child !== child) return;
      this.child = undefined;
      for (const id of [...this.pending.keys()]) this.settle(id, undefined, new Error(`the spawner process ${why}`));
    };
    child.on('exit', (code, signal) => gone(`exited (${signal ?? code})`));
    child.on('error', (err) => gone(`failed: ${err.message}`));
    this.hold(child, false);
    this.child = child;
    return child;
  }

  /** Whether the helper (its process and its channel) keeps this process's event loop alive. */
  private hold(child: ChildProcess, on: boolean): void {
    if (on) {
      child.ref();
      child.channel?.ref();
    } else {
      child.unref();
      child.channel?.unref();
    }
  }

  private settle(id: number, result?: ProcResult, err?: Error): void {
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    if (this.pending.size === 0 && this.child) this.hold(this.child, false);
    if (err) p.reject(err);
    else p.resolve(result!);
  }
}

/** The process's spawner: one helper serves every runtime of the process. */
export const spawner = new Spawner();
