import { existsSync, mkdirSync, readdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { ServiceError } from '@sandboxd/protocol';
import { ID_RANGE } from './ids.js';

/**
 * Host ids of sandboxes: each sandbox runs as its own range of ID_RANGE uids and gids, so a process
 * that escapes one sandbox is a different host user from every other sandbox's processes. The
 * ranges start above CANONICAL_ID_OFFSET (layers) and far above any subuid range useradd hands out
 * (SUB_UID_MAX defaults to 600100000), so no host user can map them in a user namespace of their own.
 */
export const SANDBOX_ID_BASE = 1_000_000_000;
/** Ranges that fit below 2^32 - 1 (uid -1 means "no change" to chown and may not be mapped). */
export const MAX_ID_RANGES = Math.floor((2 ** 32 - 1 - SANDBOX_ID_BASE) / ID_RANGE);

/** The file in a sandbox's directory recording its range (kept across stop/start and restarts). */
export const ID_RANGE_FILE = 'ids.json';

export interface IdRangeFile {
  /** Host uid and gid of root inside the sandbox. */
  base: number;
  size: number;
  /**
   * Set while the files of the sandbox's disk are moved from this range to `base` (a sandbox made
   * when all sandboxes shared LEGACY_ID_OFFSET); removed once done, so an interrupted move resumes.
   */
  movingFrom?: number;
}

export function rangeBase(k: number): number {
  return SANDBOX_ID_BASE + k * ID_RANGE;
}

function rangeIndex(base: number): number | undefined {
  const k = (base - SANDBOX_ID_BASE) / ID_RANGE;
  return Number.isInteger(k) && k >= 0 && k < MAX_ID_RANGES ? k : undefined;
}

export async function readIdRange(sandboxDir: string): Promise<IdRangeFile | undefined> {
  let j: Partial<IdRangeFile>;
  try {
    j = JSON.parse(await readFile(join(sandboxDir, ID_RANGE_FILE), 'utf8')) as Partial<IdRangeFile>;
  } catch {
    return undefined;
  }
  if (typeof j.base !== 'number' || j.size !== ID_RANGE || rangeIndex(j.base) === undefined || (j.movingFrom !== undefined && typeof j.movingFrom !== 'number')) {
    throw new ServiceError('RUNTIME_ERROR', "the sandbox's id range record is damaged; the operator must repair it").withDetail(
      `${join(sandboxDir, ID_RANGE_FILE)}: not a sandbox id range: ${JSON.stringify(j).slice(0, 200)}`,
    );
  }
  return { base: j.base, size: j.size, ...(j.movingFrom !== undefined ? { movingFrom: j.movingFrom } : {}) };
}

export async function writeIdRange(sandboxDir: string, range: IdRangeFile): Promise<void> {
  const file = join(sandboxDir, ID_RANGE_FILE);
  const tmp = `${file}.tmp`;
  await writeFile(tmp, JSON.stringify(range), { mode: 0o644 });
  await rename(tmp, file);
}

/** Where every runtime on this host records the ranges it holds (tmpfs: a reboot starts it afresh). */
export const DEFAULT_ID_REGISTRY_DIR = '/run/sandboxd/id-ranges';

/** A range another data dir's sandbox holds on this host. */
export class RangeHeldElsewhere extends ServiceError {
  constructor(base: number, holder: string) {
    super('RUNTIME_ERROR', `id range ${base} is held on this host by ${holder}`);
  }
}

interface RegistryEntry {
  dataDir: string;
  id: string;
}

/**
 * The host-wide side of id ranges: one file per range taken (named by its index, holding the data
 * dir and sandbox id), made with O_EXCL, so two daemons (or test runtimes) with different data dirs
 * never hand out the same range. Synchronous, like allocation. An entry of another data dir is
 * left alone, even when it looks stale (taking one over could race with its owner); a runtime
 * removes its own stale entries when it starts (prune), and a reboot empties the directory.
 */
export class HostIdRegistry {
  private readonly dataDir: string;
  private made = false;

  constructor(
    private readonly dir: string,
    dataDir: string,
  ) {
    this.dataDir = resolve(dataDir);
  }

  private path(k: number): string {
    if (!this.made) {
      mkdirSync(this.dir, { recursive: true, mode: 0o700 });
      this.made = true;
    }
    return join(this.dir, String(k));
  }

  private read(k: number): RegistryEntry | undefined {
    try {
      const j = JSON.parse(readFileSync(this.path(k), 'utf8')) as Partial<RegistryEntry>;
      return typeof j.dataDir === 'string' && typeof j.id === 'string' ? { dataDir: j.dataDir, id: j.id } : undefined;
    } catch {
      return undefined;
    }
  }

  /** Takes range k for sandbox `id`; false when another data dir holds it. */
  take(k: number, id: string): boolean {
    const me = JSON.stringify({ dataDir: this.dataDir, id });
    try {
      writeFileSync(this.path(k), me, { flag: 'wx', mode: 0o600 });
      return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const held = this.read(k);
    // Ours (this data dir decides among its own sandboxes in memory), or unreadable: a write cut short.
    if (!held || held.dataDir === this.dataDir) {
      writeFileSync(this.path(k), me, { mode: 0o600 });
      return true;
    }
    return false;
  }

  holder(k: number): string | undefined {
    const h = this.read(k);
    return h ? `sandbox ${h.id} of ${h.dataDir}` : undefined;
  }

  release(k: number, id: string): void {
    const held = this.read(k);
    if (held && held.dataDir === this.dataDir && held.id === id) unlinkSync(this.path(k));
  }

  /** Removes this data dir's entries for ranges none of its sandboxes holds (left by a crash). */
  prune(holds: (k: number, id: string) => boolean): void {
    if (!existsSync(this.dir)) return;
    for (const name of readdirSync(this.dir)) {
      const k = Number(name);
      if (!Number.isInteger(k)) continue;
      const held = this.read(k);
      if (held && held.dataDir === this.dataDir && !holds(k, held.id)) unlinkSync(this.path(k));
    }
  }
}

/**
 * Which range each sandbox of one data dir holds. Filled from the sandboxes' files once per process
 * (the caller's job), then kept in memory; allocation is synchronous, so concurrent creates never
 * get the same range. Allocation goes round the ranges (next free after the last one handed out)
 * rather than reusing the lowest free one, so a range freed by a destroy is not handed out again at
 * once.
 */
export class IdRanges {
  private readonly owners = new Map<number, string>();
  /** The same, by owner: a release is a lookup, not a walk over every range. */
  private readonly byOwner = new Map<string, Set<number>>();
  private next = 0;

  /** With a registry, ranges are also unique across the data dirs of this host. */
  constructor(private readonly registry?: HostIdRegistry) {}

  /**
   * Records that `owner` holds `base`; a no-op if it already does. RangeHeldElsewhere when a
   * sandbox of another data dir on this host holds it (the caller moves the sandbox to a new range).
   */
  claim(owner: string, base: number): void {
    const k = rangeIndex(base);
    if (k === undefined) throw new Error(`${base} is not the base of a sandbox id range`);
    const current = this.owners.get(k);
    if (current !== undefined && current !== owner) {
      throw new ServiceError('RUNTIME_ERROR', `the host id range of sandbox ${owner} is held by another sandbox; the operator must repair it`).withDetail(
        `id range ${base} of sandbox ${owner} is also held by sandbox ${current}`,
      );
    }
    if (current === undefined && this.registry && !this.registry.take(k, owner)) {
      throw new RangeHeldElsewhere(base, this.registry.holder(k) ?? 'another data dir');
    }
    this.hold(k, owner);
    if (k >= this.next) this.next = (k + 1) % MAX_ID_RANGES;
  }

  allocate(owner: string): number {
    for (let i = 0; i < MAX_ID_RANGES; i++) {
      const k = (this.next + i) % MAX_ID_RANGES;
      if (this.owners.has(k)) continue;
      if (this.registry && !this.registry.take(k, owner)) continue;
      this.hold(k, owner);
      this.next = (k + 1) % MAX_ID_RANGES;
      return rangeBase(k);
    }
    throw new ServiceError('RUNTIME_ERROR', `all ${MAX_ID_RANGES} sandbox id ranges are in use`);
  }

  /** Frees whatever range `owner` holds. */
  release(owner: string): void {
    for (const k of this.byOwner.get(owner) ?? []) {
      this.owners.delete(k);
      this.registry?.release(k, owner);
    }
    this.byOwner.delete(owner);
  }

  private hold(k: number, owner: string): void {
    this.owners.set(k, owner);
    let ks = this.byOwner.get(owner);
    if (!ks) this.byOwner.set(owner, (ks = new Set()));
    ks.add(k);
  }

  /** Drops this data dir's registry entries that no sandbox holds any more (after claims at start). */
  pruneRegistry(): void {
    this.registry?.prune((k, id) => this.owners.get(k) === id);
  }

  holder(base: number): string | undefined {
    const k = rangeIndex(base);
    return k === undefined ? undefined : this.owners.get(k);
  }

  get size(): number {
    return this.owners.size;
  }
}
