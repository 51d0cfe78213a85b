import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { lstat } from 'node:fs/promises';
import { dirname, relative } from 'node:path';
import { ServiceError } from '../proto.js';
import { MAX_WATCHED_DIRS, WatchRecordParser, type WatchRecord } from '../files/watch-records.js';
import { entryInfo, type Entry } from './entries.js';
import type { SandboxUsers } from './users.js';
import type { EnvdEvent } from '../proto.js';

/** Watches (WatchDir streams and polled watchers) open at once. */
export const MAX_WATCHERS = 32;
/** Events a polled watcher keeps until it is polled; older ones are dropped. */
export const MAX_POLLED_EVENTS = 10_000;
/** A polled watcher nobody asked for events this long is removed. */
const POLLED_IDLE_MS = 10 * 60_000;

/** A change below a watched directory, as the /e2b/rt/fs routes answer it. */
export type FsEvent = EnvdEvent;

export interface WatchOptions {
  root: string;
  recursive: boolean;
  includeEntry: boolean;
}

export interface WatchSink {
  ready(): void;
  event(e: FsEvent): void;
  /** The watch ended: the directory went away, or the helper failed. */
  closed(err?: ServiceError): void;
}

let open = 0;

/** One inotify watch of a directory (sbx-helper watch), its records as filesystem events. */
export class DirWatch {
  private child: ChildProcessWithoutNullStreams | null;
  private stopped = false;

  constructor(helperPath: string, private readonly o: WatchOptions, private readonly users: SandboxUsers, private readonly sink: WatchSink) {
    if (open >= MAX_WATCHERS) throw new ServiceError('QUOTA_EXCEEDED', `at most ${MAX_WATCHERS} directory watches may be open at once; stop one first`);
    open++;
    const child = spawn(helperPath, ['watch', o.root, String(MAX_WATCHED_DIRS)], { stdio: ['pipe', 'pipe', 'pipe'] });
    this.child = child;
    const parser = new WatchRecordParser();
    let stderr = '';
    let ready = false;
    child.stdin.on('error', () => undefined);
    child.stderr.on('data', (c: Buffer) => {
      if (stderr.length < 4096) stderr += c.toString('utf8');
    });
    // Records are turned into events in order, even when one needs a stat for its entry.
    let chain = Promise.resolve();
    child.stdout.on('data', (chunk: Buffer) => {
      for (const r of parser.push(chunk)) {
        if (r.event === 'ready') {
          ready = true;
          sink.ready();
        } else if (r.event === 'gone') {
          chain = chain.then(() => this.emit('remove', r.path)).then(() => this.stop());
        } else if (r.event === 'overflow' || r.event === 'limit') {
          // E2B's events have no notice for these; the client sees fewer events.
        } else chain = chain.then(() => this.record(r));
      }
    });
    child.on('error', (err) => this.end(new ServiceError('INTERNAL_ERROR', `cannot watch ${o.root}: ${err.message}`)));
    child.on('close', (code) => {
      void chain.then(() => this.end(!ready && code !== 0 && !this.stopped ? new ServiceError('INTERNAL_ERROR', `cannot watch ${o.root}: ${stderr.trim() || `exit ${code}`}`) : undefined));
    });
  }

  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    this.child?.stdin.end();
    this.child?.kill('SIGTERM');
    this.end();
  }

  private end(err?: ServiceError): void {
    if (!this.child) return;
    this.child = null;
    this.stopped = true;
    open--;
    this.sink.closed(err);
  }

  private async record(r: WatchRecord): Promise<void> {
    switch (r.event) {
      case 'created':
        return this.emit('create', r.path);
      case 'modified':
        return this.emit('write', r.path);
      case 'deleted':
        return this.emit('remove', r.path);
      case 'renamed':
        // As inotify tells it to E2B's daemon: the old name renamed, the new one created.
        await this.emit('rename', r.oldPath);
        return this.emit('create', r.path);
    }
  }

  private async emit(type: FsEvent['type'], path: string): Promise<void> {
    if (this.stopped) return;
    if (!this.o.recursive && dirname(path) !== this.o.root) return;
    const name = relative(this.o.root, path);
    if (name === '' || name.startsWith('..')) return;
    let entry: Entry | undefined;
    if (this.o.includeEntry && type !== 'remove' && type !== 'rename') {
      const st = await lstat(path).catch(() => null);
      if (st) entry = await entryInfo(path, this.users, st).catch(() => undefined);
    }
    this.sink.event({ name, type, ...(entry ? { entry } : {}) });
  }
}

interface Polled {
  watch: DirWatch;
  events: FsEvent[];
  dropped: number;
  lastPoll: number;
  error?: ServiceError;
}

/** Watchers polled with GetWatcherEvents (E2B's Python client's synchronous watch_dir). */
export class PolledWatchers {
  private readonly byId = new Map<string, Polled>();

  async create(helperPath: string, o: WatchOptions, users: SandboxUsers): Promise<string> {
    this.sweep();
    const id = randomBytes(12).toString('hex');
    await new Promise<void>((resolve, reject) => {
      let started = false;
      const entry: Polled = {
        events: [],
        dropped: 0,
        lastPoll: Date.now(),
        watch: new DirWatch(helperPath, o, users, {
          ready: () => {
            started = true;
            resolve();
          },
          event: (e) => {
            if (entry.events.length >= MAX_POLLED_EVENTS) {
              entry.events.shift();
              entry.dropped++;
            }
            entry.events.push(e);
          },
          closed: (err) => {
            if (!started) {
              this.byId.delete(id);
              reject(err ?? new ServiceError('FILE_NOT_FOUND', `${o.root} went away before it was watched`, { path: o.root }));
            } else entry.error = err;
          },
        }),
      };
      this.byId.set(id, entry);
    });
    return id;
  }

  take(id: string): FsEvent[] {
    this.sweep();
    const w = this.byId.get(id);
    if (!w) throw new ServiceError('NOT_FOUND', `watcher ${id} not found`);
    w.lastPoll = Date.now();
    const events = w.events;
    w.events = [];
    return events;
  }

  remove(id: string): void {
    const w = this.byId.get(id);
    if (!w) throw new ServiceError('NOT_FOUND', `watcher ${id} not found`);
    this.byId.delete(id);
    w.watch.stop();
  }

  private sweep(): void {
    const now = Date.now();
    for (const [id, w] of this.byId) {
      if (now - w.lastPoll > POLLED_IDLE_MS) {
        this.byId.delete(id);
        w.watch.stop();
      }
    }
  }
}
