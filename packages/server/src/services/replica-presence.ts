import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { ReplicaRepo, ReplicaRole, ReplicaRow } from '../store/types/index.js';

/** How often a serving process says in the store that it runs. */
export const REPLICA_BEAT_MS = 5000;
/** Not seen for this long (four beats), a process is taken as gone: it died without saying so, or cannot reach the store. */
export const REPLICA_GONE_MS = 20_000;
/** A process not seen for a day is forgotten (by whichever process beats). */
const REPLICA_FORGET_MS = 24 * 3600_000;
const FORGET_EVERY_BEATS = Math.round(3600_000 / REPLICA_BEAT_MS);
/** A beat that keeps failing is said when it begins and then once a minute. */
const FAILURE_LOG_EVERY_MS = 60_000;

export type ReplicaState = 'up' | 'gone' | 'stopped';

/** What a process's record says of it at `nowMs` (the store's clock). */
export function replicaState(r: Pick<ReplicaRow, 'seenAt' | 'stoppedAt'>, nowMs: number): ReplicaState {
  if (r.stoppedAt) return 'stopped';
  return nowMs - Date.parse(r.seenAt) > REPLICA_GONE_MS ? 'gone' : 'up';
}

export interface ReplicaPresenceOptions {
  replicas: ReplicaRepo;
  role: ReplicaRole;
  /** Where it serves (its API; an edge's probes). */
  url: string;
  version: string;
  log: (msg: string, extra?: Record<string, unknown>) => void;
  everyMs?: number;
}

/**
 * A serving process's own record in the store (the all-in-one daemon, each control replica, each
 * edge): written at its start, beaten every few seconds, marked stopped when it shuts down in
 * order. `sandboxd cluster status` reads them: which replicas run, and which went away without a
 * word. A store that cannot be written to costs a beat, never the service.
 */
export class ReplicaPresence {
  readonly id: string;
  private readonly startedAt = new Date().toISOString();
  private timer?: NodeJS.Timeout;
  private beats = 0;
  private failures = 0;
  private failureLoggedAt = 0;
  private beating?: Promise<void>;

  constructor(private readonly o: ReplicaPresenceOptions) {
    this.id = `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
  }

  async start(): Promise<void> {
    await this.beat();
    this.timer = setInterval(() => void this.beat(), this.o.everyMs ?? REPLICA_BEAT_MS);
    this.timer.unref();
  }

  private beat(): Promise<void> {
    this.beating ??= this.write().finally(() => (this.beating = undefined));
    return this.beating;
  }

  private async write(): Promise<void> {
    const o = this.o;
    try {
      await o.replicas.beat({ id: this.id, role: o.role, hostname: hostname(), pid: process.pid, url: o.url, version: o.version, startedAt: this.startedAt });
      if (this.beats++ % FORGET_EVERY_BEATS === 0) await o.replicas.forget(new Date(Date.now() - REPLICA_FORGET_MS).toISOString());
      if (this.failures > 0) o.log(`this ${o.role} process is recorded in the store again (${this.failures} beat(s) missed)`);
      this.failures = 0;
    } catch (err) {
      this.failures++;
      if (this.failures === 1 || Date.now() - this.failureLoggedAt >= FAILURE_LOG_EVERY_MS) {
        this.failureLoggedAt = Date.now();
        o.log(`recording this ${o.role} process in the store failed${this.failures > 1 ? ` (${this.failures} in a row)` : ''}: ${String(err)}`);
      }
    }
  }

  /** Shut down in order: no more beats, and the record says so (a store that does not answer: it is gone instead). */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.beating;
    await this.o.replicas.stopped(this.id);
  }
}
