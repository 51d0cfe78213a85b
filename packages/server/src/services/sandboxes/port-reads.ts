import type { ListeningPort } from '../../runtime/listening.js';

/** How long one read of a sandbox's socket tables answers every caller. */
export const PORTS_FRESH_MS = 1000;

interface Entry {
  value: Promise<ListeningPort[]>;
  /** When the read finished (undefined while it runs: every caller meanwhile shares it). */
  doneAt: number | undefined;
}

/**
 * What listens in sandboxes, read from their nodes for `GET /v1/sandboxes/{id}/ports`. How much
 * work a read is depends on the sandbox (a socket table of 30,000 listeners), so a sandbox's tables
 * are read at most once per PORTS_FRESH_MS whoever asks, and an organization's reads run one at a
 * time: one organization polling many crowded sandboxes waits on itself, never slows the others.
 */
export class PortReads {
  private readonly entries = new Map<string, Entry>();
  private readonly orgTail = new Map<string, Promise<unknown>>();

  constructor(private readonly now: () => number = Date.now) {}

  /** The sandbox's listening ports: `read` runs when no fresh read is there to share. */
  get(orgId: string, sandboxId: string, read: () => Promise<ListeningPort[]>): Promise<ListeningPort[]> {
    const hit = this.entries.get(sandboxId);
    if (hit && (hit.doneAt === undefined || this.now() - hit.doneAt < PORTS_FRESH_MS)) return hit.value;
    this.sweep();
    const before = this.orgTail.get(orgId) ?? Promise.resolve();
    const entry: Entry = { value: before.then(read), doneAt: undefined };
    this.entries.set(sandboxId, entry);
    const tail = entry.value.then(
      () => {
        entry.doneAt = this.now();
      },
      () => {
        // A failed read is not kept: the next caller asks again.
        if (this.entries.get(sandboxId) === entry) this.entries.delete(sandboxId);
      },
    );
    this.orgTail.set(orgId, tail);
    void tail.then(() => {
      if (this.orgTail.get(orgId) === tail) this.orgTail.delete(orgId);
    });
    return entry.value;
  }

  /** Forgets a sandbox's last read (it was deleted, or its processes changed state). */
  forget(sandboxId: string): void {
    this.entries.delete(sandboxId);
  }

  private sweep(): void {
    if (this.entries.size < 256) return;
    const now = this.now();
    for (const [id, e] of this.entries) if (e.doneAt !== undefined && now - e.doneAt >= PORTS_FRESH_MS) this.entries.delete(id);
  }
}
