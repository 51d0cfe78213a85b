import type { SnapshotCore } from './core.js';
import { PIN_KEY, SHARED_PIN_RENEW_MS } from './pins.js';

/** A snapshot's removal, and the collection of the layers of this store that nothing uses any more. */
export class Collector {
  private collecting?: Promise<void>;
  private collectAgain = false;

  constructor(private readonly c: SnapshotCore) {}

  async remove(orgId: string, id: string): Promise<void> {
    const row = await this.c.get(orgId, id);
    await this.c.d.store.snapshots.remove(row.id);
    // Ready sandboxes the pools booted from it hold its layers.
    await this.c.d.placement.dropWarm(`snap:${row.id}`);
    this.collectSoon();
  }

  /**
   * Removes the layers of this store that nothing uses: no snapshot, no sandbox that is not deleted
   * (a stopped one mounts its layers on start), no template, no capture or fork under way. Runs
   * after the teardowns under way, whose overlays still hold their layers; calls made meanwhile
   * make it run once more.
   */
  collectSoon(): Promise<void> {
    if (this.collecting) {
      this.collectAgain = true;
      return this.collecting;
    }
    this.collecting = (async () => {
      do {
        this.collectAgain = false;
        try {
          await this.collect();
        } catch (err) {
          this.c.d.log('collecting unused snapshot layers failed', { error: String(err) });
        }
      } while (this.collectAgain);
    })().finally(() => (this.collecting = undefined));
    return this.collecting;
  }

  private async collect(): Promise<void> {
    const { d, making, pins } = this.c;
    await d.settle();
    const keep = await d.store.snapshots.referencedLayers();
    for (const s of await d.store.sandboxes.live()) for (const l of s.layers) keep.add(l);
    const seen = new Set<string>();
    for (const orgId of ['', ...(await d.store.orgs.list()).map((o) => o.id)]) {
      for (const t of await d.store.templates.list(orgId)) {
        if (seen.has(t.id)) continue;
        seen.add(t.id);
        for (const l of t.layers) keep.add(l);
      }
    }
    // Read after the rows: a layer made meanwhile is either in `making` or referenced by then.
    for (const l of making) keep.add(l);
    for (const l of pins.keys()) keep.add(l);
    const removed: string[] = [];
    for (const id of await d.layers.list()) {
      if (keep.has(id) || making.has(id) || pins.has(id)) continue;
      // Pinned by another replica (a create from it under way there): renewed pins are recent.
      if (d.sharedPins && (await d.sharedPins.count(`${PIN_KEY}${id}`, Date.now() - 3 * SHARED_PIN_RENEW_MS)).n > 0) continue;
      await d.layers.remove(id);
      removed.push(id);
    }
    if (removed.length) d.log(`removed ${removed.length} snapshot layer(s) nothing uses any more`);
  }
}
