import { createHash } from 'node:crypto';
import type { Runtime, SandboxSpec } from '../runtime/types.js';

export interface WarmKey {
  /** Identity of what the sandbox boots (template id, layers, resources, env, network). */
  key: string;
  templateId: string;
}

interface Entry {
  id: string;
  key: string;
  templateId: string;
}

export function warmKeyOf(spec: SandboxSpec, templateId: string): WarmKey {
  const { env, id: _id, hostname: _hostname, ...rest } = spec;
  const stable = { ...rest, env: Object.fromEntries(Object.entries(env).filter(([k]) => k !== 'SANDBOX_ID').sort()) };
  return { key: createHash('sha256').update(JSON.stringify(stable)).digest('hex').slice(0, 24), templateId };
}

/**
 * Sandboxes booted ahead of time, per template and network setting, so a create only has to hand
 * one out (the agent already answers). Each entry is a whole sandbox with its final id; it has no
 * row in the store until claimed, so a daemon crash leaves only runtime leftovers, which the
 * reconciliation at start removes. A key is kept warm once it has been asked for.
 */
export class WarmPool {
  private ready = new Map<string, Entry[]>();
  private wanted = new Map<string, { make: () => Promise<string>; templateId: string; lastUsed: number }>();
  private filling = false;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private runtime: Pick<Runtime, 'destroy'>,
    private perKey: number,
    private log: (msg: string, extra?: Record<string, unknown>) => void,
    private maxKeys = 8,
    private refillDelayMs = 100,
  ) {}

  get enabled(): boolean {
    return this.perKey > 0 && !this.closed;
  }

  /** A ready sandbox id for `k`, or undefined. `make` boots a fresh one (for refills) and returns its id. */
  take(k: WarmKey, make: () => Promise<string>): string | undefined {
    if (!this.enabled) return undefined;
    this.wanted.set(k.key, { make, templateId: k.templateId, lastUsed: Date.now() });
    this.dropOtherKeysOf(k);
    this.trimKeys();
    const entry = this.ready.get(k.key)?.shift();
    this.schedule();
    return entry?.id;
  }

  /** Forgets a template (deleted or rebuilt): its ready sandboxes are destroyed. */
  async dropTemplate(templateId: string): Promise<void> {
    for (const [key, w] of this.wanted) if (w.templateId === templateId) this.wanted.delete(key);
    await this.destroyWhere((e) => e.templateId === templateId);
  }

  /** Ids currently held ready (not yet sandboxes of anyone). */
  ids(): string[] {
    return [...this.ready.values()].flat().map((e) => e.id);
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    while (this.filling) await new Promise((r) => setTimeout(r, 10));
    await this.destroyWhere(() => true);
  }

  private dropOtherKeysOf(k: WarmKey): void {
    for (const [key, w] of this.wanted) if (w.templateId === k.templateId && key !== k.key) this.wanted.delete(key);
    void this.destroyWhere((e) => e.templateId === k.templateId && e.key !== k.key);
  }

  private trimKeys(): void {
    if (this.wanted.size <= this.maxKeys) return;
    const oldest = [...this.wanted.entries()].sort((a, b) => a[1].lastUsed - b[1].lastUsed);
    for (const [key] of oldest.slice(0, this.wanted.size - this.maxKeys)) {
      this.wanted.delete(key);
      void this.destroyWhere((e) => e.key === key);
    }
  }

  private async destroyWhere(pred: (e: Entry) => boolean): Promise<void> {
    for (const [key, list] of this.ready) {
      const gone = list.filter(pred);
      this.ready.set(key, list.filter((e) => !pred(e)));
      for (const e of gone) await this.runtime.destroy(e.id).catch((err: unknown) => this.log('warm pool: destroy failed', { id: e.id, error: String(err) }));
    }
  }

  /** Refills a moment later, so the boot does not compete with the create that emptied the slot. */
  private schedule(): void {
    if (this.closed || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.fill();
    }, this.refillDelayMs);
    this.timer.unref();
  }

  private async fill(): Promise<void> {
    if (this.filling) return;
    this.filling = true;
    try {
      for (const [key, w] of this.wanted) {
        while (!this.closed && this.wanted.has(key) && (this.ready.get(key)?.length ?? 0) < this.perKey) {
          let id: string;
          try {
            id = await w.make();
          } catch (err) {
            this.log('warm pool: boot failed; retrying later', { error: err instanceof Error ? err.message : String(err) });
            return;
          }
          if (this.closed || !this.wanted.has(key)) {
            await this.runtime.destroy(id).catch(() => undefined);
            continue;
          }
          const list = this.ready.get(key) ?? [];
          list.push({ id, key, templateId: w.templateId });
          this.ready.set(key, list);
        }
      }
    } finally {
      this.filling = false;
    }
  }
}
