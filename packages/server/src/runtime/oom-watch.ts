import { watch, type FSWatcher } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { childCgroups, keyed, oomCounterFile, readOomKills, type CgroupLayout } from './cgroups.js';

/** `kills`: processes killed for lack of memory in the child cgroup `name` since the last report. */
export type OomListener = (name: string, kills: number) => void;

export interface OomWatchOptions {
  layout: () => Promise<CgroupLayout>;
  /** The cgroup (relative to each hierarchy's root, e.g. "/sandboxd") whose children are watched. */
  parent: string;
  /** Which children are reported (build steps live below the parent too, in `_steps`). */
  isMember?: (name: string) => boolean;
  /** v1: period of the trigger's read of /proc/vmstat. v2: of the look for a parent not made yet. */
  pollMs?: number;
  /** The host-wide count of OOM kills (v1 trigger). */
  vmstatPath?: string;
  log?: (msg: string) => void;
}

/** A cheap counter that grows when some child may have had a kill. */
interface Trigger {
  /** The counter now; undefined when its file is missing (counts as 0: it starts there once made). */
  read(): Promise<number | undefined>;
  /** Calls `fire` whenever the counter may have moved; returns the function that stops it. */
  arm(fire: () => void): () => void;
}

/** One child's last count, replaced (not changed) when the child is made again, so a read in flight can tell. */
interface Seen {
  kills: number;
}

/**
 * OOM kills in the child cgroups of one parent, as events, at a cost that does not grow with the
 * number of children while nothing is killed. Node has no eventfd, so v1's cgroup.event_control
 * is out of reach; instead one cheap counter triggers a look at the children, only when it grew:
 *  - v2: the parent's memory.events, watched with inotify. v2 counts a child's kill in every
 *    ancestor too and notifies each ancestor's file, so one watch covers every child.
 *  - v1: memory events stay in the victim's own cgroup, so no parent file moves. The host-wide
 *    `oom_kill` in /proc/vmstat does: one small file read per period, whatever the number of
 *    sandboxes; a kill elsewhere on the host costs one look at the children.
 * A child's first count is its baseline: a kill from before this process saw it (a daemon
 * restart) is not reported again. A child this process made itself (created()) starts at zero.
 */
/** Ticks a grown trigger with no kill found in any child is looked into again. */
const RECHECK_TICKS = 5;

export class OomWatch {
  private readonly seen = new Map<string, Seen>();
  private readonly listeners = new Set<OomListener>();
  private readonly pollMs: number;
  private readonly log: (msg: string) => void;
  /** Bumped when watching stops, so that a start still under way gives up. */
  private generation = 0;
  private stopTrigger?: () => void;
  private startP: Promise<void> = Promise.resolve();

  constructor(private readonly opts: OomWatchOptions) {
    this.pollMs = opts.pollMs ?? 1000;
    this.log = opts.log ?? (() => undefined);
  }

  /** A child made just now: its counter starts at zero, so every kill in it is new. */
  created(name: string): void {
    this.seen.set(name, { kills: 0 });
  }

  removed(name: string): void {
    this.seen.delete(name);
  }

  /** Starts watching with the first listener; the returned function removes this one. */
  watch(onKill: OomListener): () => void {
    this.listeners.add(onKill);
    if (this.listeners.size === 1) {
      const gen = ++this.generation;
      this.startP = this.start(gen).catch((err: unknown) => this.log(`watching OOM kills failed: ${String(err)}`));
    }
    let active = true;
    return () => {
      if (!active) return;
      active = false;
      this.listeners.delete(onKill);
      if (this.listeners.size > 0) return;
      this.generation++;
      this.stopTrigger?.();
      this.stopTrigger = undefined;
    };
  }

  /** Resolves once watching has begun: every child's baseline is taken and the trigger armed. */
  ready(): Promise<void> {
    return this.startP;
  }

  private async start(gen: number): Promise<void> {
    const layout = await this.opts.layout();
    if (!oomCounterFile(layout, this.opts.parent)) {
      this.log('no memory cgroup controller: OOM kills are not reported');
      return;
    }
    const trigger = layout.version === 1 ? this.vmstatTrigger() : this.eventsTrigger(layout);
    // Read before the first look at the children, so that a kill during that look still fires.
    let last = (await trigger.read()) ?? 0;
    const isMember = this.opts.isMember ?? (() => true);
    await this.scan(layout, (await childCgroups(layout, this.opts.parent)).filter(isMember));
    if (gen !== this.generation) return;

    let busy = false;
    let again = false;
    /** Ticks left to look again for a kill that grew the trigger and showed in no child yet. */
    let recheck = 0;
    const fire = () => {
      if (busy) {
        again = true;
        return;
      }
      busy = true;
      void (async () => {
        do {
          again = false;
          const now = (await trigger.read()) ?? 0;
          const grew = now > last;
          last = now;
          if (grew || recheck > 0) {
            const found = await this.scan(layout, [...this.seen.keys()]);
            // The host-wide counter moves a moment before the cgroup's own (on a loaded host, more
            // than a moment): a kill that grew it and showed in no child yet gets a look on each of
            // the next few ticks. A kill elsewhere on the host costs those few looks.
            if (found > 0) recheck = 0;
            else if (grew) recheck = RECHECK_TICKS;
            else recheck--;
          }
        } while (again && gen === this.generation);
      })()
        .catch((err: unknown) => this.log(`looking for OOM kills failed: ${String(err)}`))
        .finally(() => (busy = false));
    };
    this.stopTrigger = trigger.arm(fire);
  }

  /**
   * Reads the children's counters: growth over a baseline is reported, and a child seen for the
   * first time gets its count as its baseline. Returns the number of kills reported.
   */
  private async scan(layout: CgroupLayout, names: string[]): Promise<number> {
    let reported = 0;
    await Promise.all(
      names.map(async (name) => {
        const entry = this.seen.get(name);
        const kills = await readOomKills(layout, `${this.opts.parent}/${name}`);
        if (kills === undefined) return;
        if (!entry) {
          if (!this.seen.has(name)) this.seen.set(name, { kills });
          return;
        }
        // Removed or made again while the counter was read: that count is not this entry's.
        if (this.seen.get(name) !== entry) return;
        const fresh = kills - entry.kills;
        entry.kills = kills;
        if (fresh > 0) {
          reported += fresh;
          this.emit(name, fresh);
        }
      }),
    );
    return reported;
  }

  private emit(name: string, kills: number): void {
    for (const l of this.listeners) {
      try {
        l(name, kills);
      } catch (err) {
        this.log(`an OOM listener failed: ${String(err)}`);
      }
    }
  }

  private vmstatTrigger(): Trigger {
    const path = this.opts.vmstatPath ?? '/proc/vmstat';
    return {
      read: async () => keyed(await readFile(path, 'utf8'), 'oom_kill'),
      arm: (fire) => {
        const timer = setInterval(fire, this.pollMs);
        timer.unref();
        return () => clearInterval(timer);
      },
    };
  }

  /**
   * The parent's memory.events. crun makes the parent with the first sandbox, so until then (and
   * after it is removed) the file is looked for every pollMs.
   */
  private eventsTrigger(layout: CgroupLayout): Trigger {
    const file = oomCounterFile(layout, this.opts.parent)!;
    return {
      read: async () => {
        try {
          return keyed(await readFile(file, 'utf8'), 'oom_kill');
        } catch {
          return undefined;
        }
      },
      arm: (fire) => {
        let watcher: FSWatcher | undefined;
        let timer: NodeJS.Timeout | undefined;
        let stopped = false;
        const later = () => {
          clearTimeout(timer);
          watcher?.close();
          watcher = undefined;
          if (stopped) return;
          timer = setTimeout(attach, this.pollMs);
          timer.unref();
        };
        const attach = () => {
          if (stopped) return;
          try {
            watcher = watch(file, { persistent: false }, (event) => (event === 'rename' ? (fire(), later()) : fire()));
            watcher.on('error', later);
          } catch {
            later();
            return;
          }
          // It may have moved while nobody watched.
          fire();
        };
        attach();
        return () => {
          stopped = true;
          clearTimeout(timer);
          watcher?.close();
        };
      },
    };
  }
}
