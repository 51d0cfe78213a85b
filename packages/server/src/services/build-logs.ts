import { appendFile, mkdir, open, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { Store } from '../store/types/index.js';

/** Where build logs are kept: bytes appended by the process that runs the build, read from any offset. */
export interface BuildLogStorage {
  append(buildId: string, text: string): Promise<void>;
  /** At most `maxBytes` from `offset` (none past the end), and the log's length now. */
  read(buildId: string, offset: number, maxBytes: number): Promise<{ data: Buffer; size: number }>;
  /** Writes wait this long for more lines to join them (0: the next turn of the event loop). */
  gatherMs: number;
}

/** One machine: a file per build in the data directory (root's alone: a tenant's steps print its secrets). */
export function fileBuildLogs(dir: string): BuildLogStorage {
  const file = (buildId: string) => join(dir, `${buildId}.log`);
  return {
    gatherMs: 0,
    async append(buildId, text) {
      await mkdir(dir, { recursive: true, mode: 0o700 });
      await appendFile(file(buildId), text, { mode: 0o600 });
    },
    async read(buildId, offset, maxBytes) {
      const size = (await stat(file(buildId)).catch(() => undefined))?.size ?? 0;
      if (offset >= size) return { data: Buffer.alloc(0), size };
      const fh = await open(file(buildId), 'r');
      try {
        const buf = Buffer.alloc(Math.min(size - offset, maxBytes));
        const { bytesRead } = await fh.read(buf, 0, buf.length, offset);
        return { data: buf.subarray(0, bytesRead), size };
      } finally {
        await fh.close();
      }
    },
  };
}

/** A log is stored in rows of at most this many bytes, so a reader from any offset reads little more than it asked for. */
export const LOG_ROW_BYTES = 64 * 1024;
/** Replicas: a log is written at most this often (a step printing a million lines makes a few dozen writes). */
export const STORE_LOG_GATHER_MS = 100;

/** Replicas: the log in the store, so every replica reads it, during the build and after, whichever ran it. */
export function storeBuildLogs(store: Store): BuildLogStorage {
  return {
    gatherMs: STORE_LOG_GATHER_MS,
    async append(buildId, text) {
      const bytes = Buffer.from(text);
      for (let at = 0; at < bytes.length; at += LOG_ROW_BYTES) await store.buildLogs.append(buildId, bytes.subarray(at, at + LOG_ROW_BYTES));
    },
    read: (buildId, offset, maxBytes) => store.buildLogs.read(buildId, offset, maxBytes),
  };
}
