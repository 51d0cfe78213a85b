import type { RouteEntry, Routes } from '../services/routes.js';

/** How long a route stays trusted without a word from the store (cluster roles: see ensure). */
const ROUTE_TTL_MS = 30_000;
/** A route another replica changed, and no request asked for since, is kept this long (see forget). */
const STALE_KEEP_MS = 10 * 60_000;

/**
 * The lookup the gateway uses. On one machine the lifecycle fills it and it is the whole truth. In
 * a cluster (`loader` set) another replica may have made or changed a sandbox: `ensure` reads the
 * store for a sandbox not known here or not read for ROUTE_TTL_MS, and a change made here is told
 * to the other replicas (`onChange`), which forget what they knew of it.
 */
export class RouteTable implements Routes {
  /** Routes known here that another replica changed since, oldest first (Map order). */
  private staleSince = new Map<string, number>();
  private byId = new Map<string, RouteEntry>();
  private byPort = new Map<number, string>();
  private readAt = new Map<string, number>();
  /** Reads of the store under way, by sandbox; one made stale by a change heard meanwhile is not kept. */
  private loading = new Map<string, { read: Promise<RouteEntry | undefined>; stale: boolean }>();

  constructor(
    private readonly o: {
      /**
       * The sandbox's route as the store has it now; undefined: no live sandbox of that id.
       * `current()` turns false once a change is heard while it reads: what it read then is older
       * than what is known, and must not be applied (its previews' state, say).
       */
      loader?: (sandboxId: string, current: () => boolean) => Promise<RouteEntry | undefined>;
      /** A change made in this process (the lifecycle's), to tell other replicas. */
      onChange?: (sandboxId: string) => void;
      /**
       * Whether other replicas' changes reach this process now (false: they may be lost, so every
       * ensure reads the store). Absent: always.
       */
      hearing?: () => boolean;
    } = {},
  ) {}

  set(entry: RouteEntry): void {
    this.outdate(entry.sandboxId);
    this.put(entry);
    this.o.onChange?.(entry.sandboxId);
  }
  setStatus(sandboxId: string, status: RouteEntry['status']): void {
    this.outdate(sandboxId);
    const e = this.byId.get(sandboxId);
    if (e) e.status = status;
    this.o.onChange?.(sandboxId);
  }
  delete(sandboxId: string): void {
    this.outdate(sandboxId);
    this.drop(sandboxId);
    this.o.onChange?.(sandboxId);
  }
  get(sandboxId: string): RouteEntry | undefined {
    return this.byId.get(sandboxId);
  }
  byGatewayPort(port: number): RouteEntry | undefined {
    const id = this.byPort.get(port);
    return id === undefined ? undefined : this.byId.get(id);
  }

  /**
   * The sandbox's route, read from the store first when it is not known here or is old (cluster
   * roles). A store that cannot answer leaves what is known in place: sandboxes already routed
   * keep being served while it is away.
   */
  async ensure(sandboxId: string): Promise<RouteEntry | undefined> {
    const known = this.byId.get(sandboxId);
    const loader = this.o.loader;
    if (!loader || (known && (this.o.hearing?.() ?? true) && Date.now() - (this.readAt.get(sandboxId) ?? 0) < ROUTE_TTL_MS)) return known;
    const under = this.loading.get(sandboxId);
    if (under) return under.read;
    const load = { read: undefined as unknown as Promise<RouteEntry | undefined>, stale: false };
    load.read = loader(sandboxId, () => !load.stale)
      .then(
        (fresh) => {
          // A change heard while the store answered may be newer than this answer: it serves the
          // request that asked, and the next one reads again.
          if (load.stale) return fresh;
          if (fresh) this.put(fresh);
          else this.drop(sandboxId);
          return fresh;
        },
        (err: unknown) => {
          if (known) return this.byId.get(sandboxId);
          throw err;
        },
      )
      .finally(() => {
        if (this.loading.get(sandboxId) === load) this.loading.delete(sandboxId);
      });
    this.loading.set(sandboxId, load);
    return load.read;
  }

  /** Another replica changed the sandbox: what was known of it here is read again when next used. */
  forget(sandboxId: string): void {
    this.outdate(sandboxId);
    // Kept, not trusted: the next request reads the store first, and is served what is known only
    // if the store cannot answer (a change heard just before PostgreSQL went away must not make
    // the edge drop a sandbox it knows). Entries no request asked for again go after a while.
    if (!this.byId.has(sandboxId)) return;
    this.readAt.delete(sandboxId);
    this.staleSince.delete(sandboxId);
    this.staleSince.set(sandboxId, Date.now());
    const old = Date.now() - STALE_KEEP_MS;
    for (const [id, at] of this.staleSince) {
      if (at > old) break;
      this.drop(id);
    }
  }

  /**
   * Every route is read again when next used (messages from other replicas may have been lost);
   * until then, and while the store cannot answer, they are served as they were.
   */
  forgetAll(): void {
    for (const load of this.loading.values()) load.stale = true;
    this.loading.clear();
    this.readAt.clear();
  }

  /** A read of the sandbox under way began before this change: its answer is not kept. */
  private outdate(sandboxId: string): void {
    const load = this.loading.get(sandboxId);
    if (!load) return;
    load.stale = true;
    this.loading.delete(sandboxId);
  }

  private put(entry: RouteEntry): void {
    this.staleSince.delete(entry.sandboxId);
    const old = this.byId.get(entry.sandboxId);
    if (old?.port != null && old.port !== entry.port) this.byPort.delete(old.port);
    this.byId.set(entry.sandboxId, entry);
    this.readAt.set(entry.sandboxId, Date.now());
    if (entry.port != null) this.byPort.set(entry.port, entry.sandboxId);
  }
  private drop(sandboxId: string): void {
    this.staleSince.delete(sandboxId);
    const old = this.byId.get(sandboxId);
    if (old?.port != null) this.byPort.delete(old.port);
    this.byId.delete(sandboxId);
    this.readAt.delete(sandboxId);
  }
}
