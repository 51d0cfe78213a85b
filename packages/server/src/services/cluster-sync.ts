import { randomUUID } from 'node:crypto';
import { SANDBOX_EVENT_KINDS, type SandboxEventKind } from '@sandboxd/protocol';
import type { Coordination } from '../store/types/index.js';
import type { EventBus, SandboxEventMessage } from './events.js';
import type { Routes } from './routes.js';

/** How often one sandbox's use is told to the other replicas, at most. */
const ACTIVITY_EVERY_MS = 5_000;
/** How often the sandboxes with requests or WebSockets open here are told as in use. */
const BUSY_EVERY_MS = 10_000;
const CHANNEL = 'bus';

type Message =
  | { o: string; t: 'event'; m: SandboxEventMessage }
  | { o: string; t: 'route'; id: string }
  | { o: string; t: 'activity'; id: string; at: number }
  | { o: string; t: 'interrupt'; id: string };

export interface ClusterSyncDeps {
  coordination: Coordination;
  routes: Routes;
  events: EventBus;
  /** Another replica saw the sandbox used at `at` (its idle clock). */
  activity: (id: string, at: number) => void;
  /** Another replica cut the sandbox's requests and WebSockets (its deadline paused it). */
  interrupt: (id: string) => void;
  /** The sandboxes with a request in flight or a WebSocket open through this process's gateway. */
  busy: () => Iterable<string>;
  log: (msg: string, extra?: Record<string, unknown>) => void;
}

const ID = /^[a-z0-9-]{1,64}$/;

/** A message from the bus, checked: another replica's, or the store's hands, not trusted blindly. */
function parse(payload: string): Message | undefined {
  let m: unknown;
  try {
    m = JSON.parse(payload);
  } catch {
    return undefined;
  }
  if (typeof m !== 'object' || m === null) return undefined;
  const r = m as Record<string, unknown>;
  if (typeof r.o !== 'string') return undefined;
  if ((r.t === 'route' || r.t === 'interrupt') && typeof r.id === 'string' && ID.test(r.id)) return r as Message;
  if (r.t === 'activity' && typeof r.id === 'string' && ID.test(r.id) && typeof r.at === 'number' && Number.isFinite(r.at)) return r as Message;
  if (r.t === 'event') {
    const e = r.m as Record<string, unknown> | undefined;
    const d = e?.data as Record<string, unknown> | undefined;
    if (
      typeof e?.orgId === 'string' &&
      typeof e.kind === 'string' &&
      (SANDBOX_EVENT_KINDS as readonly string[]).includes(e.kind) &&
      typeof d?.id === 'string' &&
      ID.test(d.id) &&
      typeof d.status === 'string' &&
      typeof d.at === 'string' &&
      (d.reason === undefined || typeof d.reason === 'string')
    ) {
      const data = { id: d.id, status: d.status, at: d.at, ...(d.reason !== undefined ? { reason: d.reason as string } : {}) };
      return { o: r.o, t: 'event', m: { kind: e.kind as SandboxEventKind, orgId: e.orgId, data } };
    }
  }
  return undefined;
}

/**
 * What the replicas of control (and edge) tell each other through the store's messages, so that
 * none keeps in its memory alone what another needs:
 * - lifecycle events, for every replica's server-sent streams;
 * - route changes: the others read the sandbox from the store again when next asked;
 * - uses of sandboxes (throttled), for the idle clock of whichever replica sweeps;
 * - interrupts (a deadline cut the sandbox's connections: those held by other replicas too).
 * A message lost while the store was away is made up for: every route is read again.
 */
export class ClusterSync {
  readonly origin = randomUUID();
  private readonly told = new Map<string, number>();
  private readonly timer: NodeJS.Timeout;
  private readonly unsubscribe: () => void;
  private readonly unwatch: () => void;

  constructor(private readonly d: ClusterSyncDeps) {
    this.unsubscribe = d.coordination.subscribe(CHANNEL, (p) => this.receive(p));
    this.unwatch = d.coordination.onReconnect(() => d.routes.forgetAll());
    d.events.relay = (m) => this.send({ o: this.origin, t: 'event', m });
    this.timer = setInterval(() => {
      for (const id of d.busy()) this.used(id, true);
      const old = Date.now() - ACTIVITY_EVERY_MS;
      for (const [id, at] of this.told) if (at < old) this.told.delete(id);
    }, BUSY_EVERY_MS);
    this.timer.unref();
  }

  /** A route changed here. */
  routeChanged(id: string): void {
    this.send({ o: this.origin, t: 'route', id });
  }

  /** A sandbox was used here (a request, a WebSocket). */
  used(id: string, force = false): void {
    const now = Date.now();
    if (!force && now - (this.told.get(id) ?? 0) < ACTIVITY_EVERY_MS) return;
    this.told.set(id, now);
    this.send({ o: this.origin, t: 'activity', id, at: now });
  }

  interrupted(id: string): void {
    this.send({ o: this.origin, t: 'interrupt', id });
  }

  close(): void {
    clearInterval(this.timer);
    this.unsubscribe();
    this.unwatch();
    this.d.events.relay = undefined;
  }

  private send(m: Message): void {
    this.d.coordination.publish(CHANNEL, JSON.stringify(m)).catch((err: unknown) => {
      // The store is away: the others read every route again once it is back.
      this.d.log('telling the other replicas failed', { kind: m.t, error: String(err) });
    });
  }

  private receive(payload: string): void {
    const m = parse(payload);
    if (!m || m.o === this.origin) return;
    switch (m.t) {
      case 'event':
        this.d.events.deliver(m.m);
        break;
      case 'route':
        this.d.routes.forget(m.id);
        break;
      case 'activity':
        this.d.activity(m.id, Math.min(m.at, Date.now()));
        break;
      case 'interrupt':
        this.d.interrupt(m.id);
        break;
    }
  }
}
