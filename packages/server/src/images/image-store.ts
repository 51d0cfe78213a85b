import { randomBytes } from 'node:crypto';
import { mkdir, readFile, readdir, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseImageRef } from './refs.js';

/** A base image made of layers in the layer store (imported from an archive or pulled). */
export interface ImageRecord {
  /** Familiar reference, e.g. `ubuntu:22.04`. */
  ref: string;
  /** Layer ids, bottom-most first (OCI order). */
  layers: string[];
  /** `KEY=value` entries of the image config. */
  env: string[];
  workdir: string;
  user?: string;
  entrypoint?: string[];
  cmd?: string[];
  /** `sha256:<hex>` of the image config: the image's identity. */
  configDigest: string;
  source: 'import' | 'pull';
  /** Where it came from: archive path or registry URL. */
  origin: string;
  createdAt: string;
}

/** Image references → records, one small JSON file each, replaced atomically. */
export class FsImageStore {
  constructor(readonly root: string) {}

  async get(ref: string): Promise<ImageRecord | undefined> {
    const file = this.file(ref);
    try {
      return JSON.parse(await readFile(file, 'utf8')) as ImageRecord;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
  }

  async put(record: ImageRecord): Promise<void> {
    await mkdir(this.root, { recursive: true, mode: 0o700 });
    const file = this.file(record.ref);
    const tmp = `${file}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
    await writeFile(tmp, JSON.stringify(record, null, 2) + '\n');
    await rename(tmp, file);
  }

  async remove(ref: string): Promise<void> {
    await rm(this.file(ref), { force: true });
  }

  async list(): Promise<ImageRecord[]> {
    const names = (await readdir(this.root).catch(() => [] as string[])).filter((n) => n.endsWith('.json'));
    const out: ImageRecord[] = [];
    for (const n of names) {
      const rec = JSON.parse(await readFile(join(this.root, n), 'utf8')) as ImageRecord;
      out.push(rec);
    }
    return out.sort((a, b) => a.ref.localeCompare(b.ref));
  }

  /** Every layer id referenced by some image (for garbage collection by the caller). */
  async referencedLayers(): Promise<Set<string>> {
    return new Set((await this.list()).flatMap((r) => r.layers));
  }

  private file(ref: string): string {
    return join(this.root, `${encodeURIComponent(parseImageRef(ref).familiar)}.json`);
  }
}
