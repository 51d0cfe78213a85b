import { randomBytes } from 'node:crypto';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import type { Readable } from 'node:stream';
import { ServiceError } from '@sandboxd/protocol';
import type { FsLayerStore, Log } from './layer-store.js';
import { digestLayerTree, LAYER_TAR_FORMAT, packLayer, type LayerDigest } from './layer-tar.js';

/** What `content.json` beside a layer's tree records: its content digest, in which format. */
export interface LayerContentRecord extends LayerDigest {
  format: string;
}

export const CONTENT_FILE = 'content.json';

/** Writes `content.json` into a layer directory (atomically: a reader never sees half of it). */
export async function writeContentRecord(layerDir: string, d: LayerDigest): Promise<void> {
  const record: LayerContentRecord = { format: LAYER_TAR_FORMAT, digest: d.digest, bytes: d.bytes };
  const tmp = join(layerDir, `.${CONTENT_FILE}.${process.pid}-${randomBytes(4).toString('hex')}`);
  await writeFile(tmp, JSON.stringify(record) + '\n');
  await rename(tmp, join(layerDir, CONTENT_FILE));
}

export async function readContentRecord(layerDir: string): Promise<LayerDigest | undefined> {
  try {
    const r = JSON.parse(await readFile(join(layerDir, CONTENT_FILE), 'utf8')) as Partial<LayerContentRecord>;
    if (r.format !== LAYER_TAR_FORMAT || typeof r.digest !== 'string' || !/^sha256:[0-9a-f]{64}$/.test(r.digest) || !Number.isSafeInteger(r.bytes)) return undefined;
    return { digest: r.digest, bytes: r.bytes! };
  } catch {
    return undefined;
  }
}

/**
 * The content digests of a store's layers, for serving them to nodes: computed once per layer (a
 * tar of its tree, read through) and kept in `content.json` beside it; concurrent asks share one
 * computation. A layer's tree never changes once made, so neither does its digest.
 */
export class LayerContents {
  private readonly inflight = new Map<string, Promise<LayerDigest>>();
  private readonly stores: FsLayerStore[];

  constructor(
    store: FsLayerStore,
    private readonly log: Log = () => undefined,
  ) {
    this.stores = [store];
  }

  /** Serves the layers of another store too (the snapshots' and forks'), after those of the first. */
  add(store: FsLayerStore): void {
    this.stores.push(store);
  }

  /** The store that holds layer `id`, if any does. */
  private async storeOf(id: string): Promise<FsLayerStore | undefined> {
    for (const s of this.stores) if (await s.has(id)) return s;
    return undefined;
  }

  async has(id: string): Promise<boolean> {
    return (await this.storeOf(id)) !== undefined;
  }

  async of(id: string): Promise<LayerDigest> {
    const store = await this.storeOf(id);
    if (!store) throw new ServiceError('INVALID_STATE', `layer ${id} is not in this replica's layers directories`);
    const dir = dirname(store.path(id));
    const known = await readContentRecord(dir);
    if (known) return known;
    let p = this.inflight.get(id);
    if (!p) {
      p = (async () => {
        const t0 = Date.now();
        const d = await digestLayerTree(store.path(id));
        await writeContentRecord(dir, d);
        this.log(`layer ${id.slice(0, 12)}: content digest ${d.digest.slice(0, 19)}… (${(d.bytes / 1e6).toFixed(1)} MB) in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
        return d;
      })().finally(() => this.inflight.delete(id));
      this.inflight.set(id, p);
    }
    return p;
  }

  /** The layer's tar stream, whose bytes hash to of(id) (the receiver checks). */
  async open(id: string): Promise<LayerDigest & { stream: Readable }> {
    const d = await this.of(id);
    const store = await this.storeOf(id);
    if (!store) throw new ServiceError('INVALID_STATE', `layer ${id} is not in this replica's layers directories`);
    return { ...d, stream: packLayer(store.path(id)) };
  }
}
