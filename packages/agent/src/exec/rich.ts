import { constants, statSync } from 'node:fs';
import { open, readdir, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { ExecuteResult, RichOutput } from '../proto.js';

/** The result's inline rich fields (each set only when found), and every output file found. */
export type RichFields = Pick<ExecuteResult, 'png' | 'svg' | 'html' | 'json' | 'markdown' | 'result'> & { rich_outputs: RichOutput[] };

const KINDS: Record<string, { type: string; mime: string }> = {
  png: { type: 'image', mime: 'image/png' },
  svg: { type: 'image', mime: 'image/svg+xml' },
  html: { type: 'html', mime: 'text/html' },
  json: { type: 'json', mime: 'application/json' },
  md: { type: 'markdown', mime: 'text/markdown' },
};

/** Largest file inlined into the JSON result; bigger ones are only listed in rich_outputs. */
const MAX_INLINE_BYTES = 8 * 1024 * 1024;
/** result.txt is cut at 1 MiB by the bootstrap; anything bigger was not written by it. */
const MAX_RESULT_BYTES = 1024 * 1024 + 16;

/**
 * A file the sandbox's code could have replaced: read only if it is a regular file (never through a
 * symlink, never a FIFO or device that would block or never end) of at most `max` bytes. `size`
 * only: null when it is not such a file, else its size (and its bytes when `read`).
 */
export async function regularFile(path: string, max: number, read: boolean): Promise<{ size: number; data?: Buffer } | null> {
  let fh;
  try {
    fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return null;
  }
  try {
    const st = await fh.stat();
    if (!st.isFile()) return null;
    if (!read || st.size > max) return { size: st.size };
    return { size: st.size, data: await fh.readFile() };
  } catch {
    return null;
  } finally {
    await fh.close().catch(() => undefined);
  }
}

/**
 * Reads what the Python bootstrap left in an execution's output directory (NNN-kind.ext files and
 * result.txt). The first file of each kind also becomes a top-level field (png as base64).
 */
export async function collectRichOutputs(outDir: string): Promise<RichFields> {
  const fields: RichFields = { rich_outputs: [] };
  // Nearly every run produces nothing and the directory is created on first use: one failing stat
  // on this thread beats a round trip through the thread pool (whose per-thread heaps only grow).
  if (!statSync(outDir, { throwIfNoEntry: false })) return fields;
  let names: string[];
  try {
    names = (await readdir(outDir)).sort();
  } catch {
    return fields;
  }
  for (const name of names) {
    const path = join(outDir, name);
    if (name === 'result.txt') {
      const f = await regularFile(path, MAX_RESULT_BYTES, true);
      if (f?.data) fields.result = f.data.toString('utf8');
      continue;
    }
    const ext = name.slice(name.lastIndexOf('.') + 1);
    const kind = KINDS[ext];
    if (!kind) continue;
    const field = ext === 'md' ? 'markdown' : (ext as 'png' | 'svg' | 'html' | 'json');
    const f = await regularFile(path, MAX_INLINE_BYTES, fields[field] === undefined);
    if (!f) continue;
    fields.rich_outputs.push({ type: kind.type, path, mime: kind.mime });
    const data = f.data;
    if (!data) continue;
    if (field === 'png') fields.png = data.toString('base64');
    else if (field !== 'json') fields[field] = data.toString('utf8');
    else {
      try {
        fields.json = JSON.parse(data.toString('utf8'));
      } catch {
        // not JSON after all: only listed
      }
    }
  }
  return fields;
}

/** Keeps the output directories of the most recent executions; older ones are removed. */
export class OutputDirs {
  private dirs: string[] = [];

  constructor(private readonly keep: number) {}

  remember(dir: string): void {
    this.dirs.push(dir);
    while (this.dirs.length > this.keep) void rm(this.dirs.shift()!, { recursive: true, force: true });
  }
}

export function discard(dir: string): Promise<void> {
  return rm(dir, { recursive: true, force: true });
}
