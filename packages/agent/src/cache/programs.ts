import { createHash, randomBytes } from 'node:crypto';
import { mkdir, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export interface CompileOutcome {
  ok: boolean;
  /** The cached program (when ok). */
  binary: string;
  /** Compiler output (when not ok, or warnings). */
  stdout: string;
  stderr: string;
  exitCode: number;
  timedOut: boolean;
  cached: boolean;
}

export interface CompileRun {
  stdout: string;
  stderr: string;
  exitCode: number;
  timedOut: boolean;
  /** File name of the program the compiler wrote into its directory. */
  output: string;
}

/** Runs a compiler in `dir` (which holds main.go); resolves once it has finished. */
export type Compiler = (dir: string) => Promise<CompileRun>;

/**
 * Content-addressed cache of compiled programs (Go binaries) on the sandbox's disk: the key hashes
 * the source and the toolchain, so the same source never compiles twice, and concurrent requests
 * for one key share one compilation.
 */
export class ProgramCache {
  hits = 0;
  misses = 0;
  private entries: number | null = null;
  private inflight = new Map<string, Promise<CompileOutcome>>();

  constructor(private readonly dir: string) {}

  static key(parts: string[]): string {
    const h = createHash('sha256');
    for (const p of parts) h.update(p).update('\0');
    return h.digest('hex');
  }

  async getOrCompile(key: string, source: string, compile: Compiler): Promise<CompileOutcome> {
    const binary = join(this.dir, key);
    if (await exists(binary)) {
      this.hits++;
      return { ok: true, binary, stdout: '', stderr: '', exitCode: 0, timedOut: false, cached: true };
    }
    const running = this.inflight.get(key);
    if (running) {
      this.hits++;
      return running;
    }
    this.misses++;
    const p = this.compile(key, binary, source, compile).finally(() => this.inflight.delete(key));
    this.inflight.set(key, p);
    return p;
  }

  private async compile(key: string, binary: string, source: string, compile: Compiler): Promise<CompileOutcome> {
    const work = join(this.dir, `build-${key.slice(0, 16)}-${randomBytes(4).toString('hex')}`);
    await mkdir(work, { recursive: true });
    try {
      await writeFile(join(work, 'main.go'), source);
      const { output, ...r } = await compile(work);
      if (r.exitCode !== 0 || r.timedOut) return { ...r, ok: false, binary: '', cached: false };
      await rename(join(work, output), binary);
      if (this.entries !== null) this.entries++;
      return { ...r, ok: true, binary, cached: false };
    } finally {
      await rm(work, { recursive: true, force: true });
    }
  }

  async size(): Promise<number> {
    if (this.entries === null) {
      try {
        this.entries = (await readdir(this.dir)).filter((n) => !n.startsWith('build-')).length;
      } catch {
        this.entries = 0;
      }
    }
    return this.entries;
  }

  async clear(): Promise<number> {
    const n = await this.size();
    let names: string[] = [];
    try {
      names = await readdir(this.dir);
    } catch {
      // nothing cached yet
    }
    await Promise.all(names.filter((n) => !n.startsWith('build-')).map((n) => rm(join(this.dir, n), { force: true })));
    this.entries = 0;
    return n;
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch {
    return false;
  }
}
