import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdir, readdir, rename, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

export interface BlobInfo {
  /** Lowercase sha256 hex of the content. */
  sha256: string;
  size: number;
}

export interface PutOptions {
  /** Expected sha256 (hex, or `sha256:<hex>`): content that does not match is rejected and not stored. */
  sha256?: string;
  /** Expected size in bytes: checked while streaming, so an oversized body stops early. */
  size?: number;
  /** Upper bound for bodies of unknown size. */
  maxBytes?: number;
  signal?: AbortSignal;
}

export class BlobMismatchError extends Error {
  constructor(
    message: string,
    readonly kind: 'size' | 'sha256' | 'too-large',
  ) {
    super(message);
    this.name = 'BlobMismatchError';
  }
}

const HEX = /^[0-9a-f]{64}$/;

/** `sha256:<hex>` or `<hex>` → `<hex>` (lowercase); throws on anything else. */
export function parseSha256(digest: string): string {
  const hex = digest.toLowerCase().replace(/^sha256:/, '');
  if (!HEX.test(hex)) throw new Error(`not a sha256 digest: ${digest}`);
  return hex;
}

/**
 * Content-addressed files (uploads for COPY steps, OCI blobs) at `<root>/sha256/<hex>`. A put
 * streams into `<root>/.tmp-*`, hashing as it goes, and renames into place only after the size and
 * hash match, so a blob under its name is always complete and correct. Uploads are tenants' files:
 * blobs are root's alone (0600 in 0700 directories); a build step reads its own copy of an input
 * (builder/inputs.ts).
 */
export class FsBlobStore {
  constructor(readonly root: string) {}

  path(sha256: string): string {
    return join(this.root, 'sha256', parseSha256(sha256));
  }

  async has(sha256: string): Promise<boolean> {
    return (await this.stat(sha256)) !== undefined;
  }

  async stat(sha256: string): Promise<BlobInfo | undefined> {
    const st = await stat(this.path(sha256)).catch(() => undefined);
    return st ? { sha256: parseSha256(sha256), size: st.size } : undefined;
  }

  async put(body: Readable | AsyncIterable<Uint8Array>, opts: PutOptions = {}): Promise<BlobInfo> {
    const want = opts.sha256 === undefined ? undefined : parseSha256(opts.sha256);
    const limit = opts.size ?? opts.maxBytes;
    await mkdir(this.root, { recursive: true, mode: 0o700 });
    await mkdir(join(this.root, 'sha256'), { recursive: true, mode: 0o700 });
    const tmp = join(this.root, `.tmp-${process.pid}-${randomBytes(6).toString('hex')}`);
    const hash = createHash('sha256');
    let size = 0;
    const meter = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        size += chunk.length;
        if (limit !== undefined && size > limit) {
          const kind = opts.size !== undefined ? 'size' : 'too-large';
          return cb(new BlobMismatchError(`body exceeds ${limit} bytes`, kind));
        }
        hash.update(chunk);
        cb(null, chunk);
      },
    });
    try {
      await pipeline(body, meter, createWriteStream(tmp, { flags: 'wx', mode: 0o600 }), { signal: opts.signal });
      if (opts.size !== undefined && size !== opts.size) {
        throw new BlobMismatchError(`body has ${size} bytes, expected ${opts.size}`, 'size');
      }
      const got = hash.digest('hex');
      if (want !== undefined && got !== want) {
        throw new BlobMismatchError(`body has sha256 ${got}, expected ${want}`, 'sha256');
      }
      await rename(tmp, this.path(got));
      return { sha256: got, size };
    } finally {
      await rm(tmp, { force: true });
    }
  }

  open(sha256: string): Readable {
    return createReadStream(this.path(sha256));
  }

  async remove(sha256: string): Promise<void> {
    await rm(this.path(sha256), { force: true });
  }

  async list(): Promise<string[]> {
    return (await readdir(join(this.root, 'sha256')).catch(() => [] as string[])).filter((n) => HEX.test(n)).sort();
  }

  /** Removes temp files of puts that died with their process (call at startup). */
  async cleanupStale(): Promise<void> {
    for (const n of await readdir(this.root).catch(() => [] as string[])) {
      const pid = /^\.tmp-(\d+)-/.exec(n)?.[1];
      if (pid && !alive(Number(pid))) await rm(join(this.root, n), { force: true });
    }
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
