import { randomBytes } from 'node:crypto';
import type { SnapshotCore } from './core.js';

/** Shared pins: their key in the store's counter, and how often a held one is recorded again (the counter forgets events after two minutes). */
export const PIN_KEY = 'snapshot-pin:';
export const SHARED_PIN_RENEW_MS = 30_000;

/** Pins on a snapshot's layers while an operation makes a row reference them: in this process, and (a cluster's) in the store for the other replicas. */
export class Pins {
  constructor(private readonly c: SnapshotCore) {}

  /**
   * Keeps `layers` from being collected while `fn` runs: a create, restore or promote that read a
   * snapshot must not find its layers gone (a delete of the snapshot at the same moment) before its
   * own row references them.
   */
  async pinned<T>(layers: string[], fn: () => Promise<T>): Promise<T> {
    const pins = this.c.pins;
    for (const l of layers) pins.set(l, (pins.get(l) ?? 0) + 1);
    const shared = this.c.d.sharedPins;
    const recorded: string[] = [];
    const record = async () => {
      for (const l of layers) {
        const id = `pin-${randomBytes(12).toString('hex')}`;
        await shared!.record(`${PIN_KEY}${l}`, Date.now(), id);
        recorded.push(id);
      }
    };
    let renew: NodeJS.Timeout | undefined;
    try {
      if (shared) {
        // Recorded before fn reads the snapshot again: a collection that misses this pin ran after
        // the snapshot's row was gone, and that read is then a 404.
        await record();
        renew = setInterval(() => void record().catch((err: unknown) => this.c.d.log('renewing a snapshot pin failed', { error: String(err) })), SHARED_PIN_RENEW_MS);
      }
      return await fn();
    } finally {
      clearInterval(renew);
      for (const id of recorded) await shared!.remove(id).catch(() => undefined);
      for (const l of layers) {
        const n = (pins.get(l) ?? 1) - 1;
        if (n <= 0) pins.delete(l);
        else pins.set(l, n);
      }
    }
  }
}
