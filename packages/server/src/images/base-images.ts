import { chmod, mkdir, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { debianSuiteAvailability, readHostAptConfig } from './apt-sources.js';
import type { FsBlobStore } from './blob-store.js';
import type { FsImageStore, ImageRecord } from './image-store.js';
import { sha256Hex, type FsLayerStore, type Log } from './layer-store.js';
import { runTool } from '../runtime/proc.js';
import { ALLOWED_BASE_IMAGES, parseImageRef } from './refs.js';
import { pullImage, type RegistryClient } from './registry.js';
import { shiftOwnership } from '../runtime/shift.js';
import { type DebianRootfsRecipe, type LayerInfo } from './types.js';
import { CANONICAL_ID_OFFSET } from '../runtime/ids.js';

/** A base image ready to build on. */
export interface ResolvedBase {
  ref: string;
  /** Root of the build cache chain: a hash of the base's layer ids. */
  key: string;
  /** Top-most first. */
  layers: LayerInfo[];
  env: Record<string, string>;
  /** null when the image sets none (`/`). */
  workdir: string | null;
  /** How it was provided, for the build log. */
  source: string;
}

const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

/** Allowed images Debian's own packages can provide honestly (same distribution and version). */
export const DEBIAN_BASES: Record<string, { recipe: DebianRootfsRecipe; env: Record<string, string>; pythonCompat?: boolean; note: string }> = {
  'debian:11': {
    recipe: { kind: 'debian-rootfs', suite: 'bullseye', variant: 'minbase', packages: [] },
    env: { PATH: DEFAULT_PATH },
    note: 'Debian 11 (bullseye) minbase from Debian packages',
  },
  'debian:10': {
    recipe: { kind: 'debian-rootfs', suite: 'buster', variant: 'minbase', packages: [] },
    env: { PATH: DEFAULT_PATH },
    note: 'Debian 10 (buster) minbase from Debian packages',
  },
  'python:3.11': {
    recipe: { kind: 'debian-rootfs', suite: 'bookworm', variant: 'minbase', packages: ['ca-certificates', 'python3', 'python3-pip', 'python3-venv'] },
    env: { PATH: DEFAULT_PATH, LANG: 'C.UTF-8' },
    pythonCompat: true,
    note: "Debian 12 with Python 3.11.2 from Debian's packages (python3, pip, venv)",
  },
};

export interface BaseImageResolverDeps {
  layers: FsLayerStore;
  images: FsImageStore;
  blobs: FsBlobStore;
  /** null: no registry configured (pulls are not attempted). */
  registry: RegistryClient | null;
  /** How an operator configures a registry mirror (shown in errors), e.g. the config variable. */
  registryHint?: string;
}

/**
 * Finds the layers of a `from` image. In order: an image imported (or pulled) into the image store;
 * Debian's packages for the images they can honestly provide; a pull from the registry. An image
 * none of these can provide fails at once with a message saying how to provide it. An image is
 * never silently replaced by a different one.
 */
export class BaseImageResolver {
  private readonly inflight = new Map<string, Promise<ResolvedBase>>();

  constructor(private readonly deps: BaseImageResolverDeps) {}

  resolve(ref: string, log: Log, signal?: AbortSignal): Promise<ResolvedBase> {
    const running = this.inflight.get(ref);
    if (running) return running;
    const p = this.resolveOnce(ref, log, signal).finally(() => this.inflight.delete(ref));
    this.inflight.set(ref, p);
    return p;
  }

  private async resolveOnce(ref: string, log: Log, signal?: AbortSignal): Promise<ResolvedBase> {
    if (!(ALLOWED_BASE_IMAGES as readonly string[]).includes(ref)) {
      throw new Error(`base image "${ref}" is not allowed; allowed: ${ALLOWED_BASE_IMAGES.join(', ')}`);
    }
    const familiar = parseImageRef(ref).familiar;
    const stored = await this.deps.images.get(familiar);
    if (stored && (await this.allLayersPresent(stored))) return this.fromRecord(stored, `${stored.source} (${stored.origin})`, log);

    const reasons: string[] = [];
    const debian = DEBIAN_BASES[familiar];
    if (debian) {
      const host = await readHostAptConfig();
      const avail = await debianSuiteAvailability(host, debian.recipe.suite);
      if (avail.state !== 'missing') {
        log(`${familiar}: ${debian.note}`);
        const rootfs = await this.deps.layers.ensureRootfs(debian.recipe, log, { signal });
        const layers = [rootfs];
        if (debian.pythonCompat) layers.unshift(await ensurePythonCompatLayer(this.deps.layers, log));
        return {
          ref: familiar,
          key: baseKey(layers.map((l) => l.id)),
          layers,
          env: { ...debian.env },
          workdir: null,
          source: debian.note,
        };
      }
      reasons.push(
        `Debian suite ${debian.recipe.suite} is no longer on this host's Debian mirror (${avail.checked.filter((u) => u.endsWith('/Release')).join(', ')} not found; old releases move to the Debian archive)`,
      );
    } else {
      reasons.push(`${familiar} is not a Debian image, so it cannot be built from Debian's packages`);
    }

    if (this.deps.registry) {
      try {
        const rec = await pullImage(familiar, { ...this.deps, registry: this.deps.registry, log, signal });
        return this.fromRecord(rec, `pulled from ${this.deps.registry.url}`, log);
      } catch (err) {
        signal?.throwIfAborted();
        reasons.push(`the registry could not provide it (${(err as Error).message})`);
      }
    } else {
      reasons.push('no image registry is configured');
    }
    throw new Error(
      `base image ${familiar} is not available: ${reasons.join('; ')}. Provide it with ` +
        `\`sandboxd images import ${familiar} FILE\` (FILE from \`docker save ${familiar}\` or an OCI archive)` +
        (this.deps.registryHint ? `, or configure a reachable registry mirror (${this.deps.registryHint})` : ', or configure a reachable registry mirror'),
    );
  }

  private async allLayersPresent(rec: ImageRecord): Promise<boolean> {
    for (const id of rec.layers) if (!(await this.deps.layers.has(id))) return false;
    return true;
  }

  private async fromRecord(rec: ImageRecord, source: string, log: Log): Promise<ResolvedBase> {
    const skeleton = await this.skeletonLayer(log);
    const ids = [skeleton.id, ...[...rec.layers].reverse()];
    const env: Record<string, string> = {};
    for (const kv of rec.env) {
      const i = kv.indexOf('=');
      if (i > 0) env[kv.slice(0, i)] = kv.slice(i + 1);
    }
    env.PATH ??= DEFAULT_PATH;
    return {
      ref: rec.ref,
      key: baseKey(ids),
      layers: ids.map((id) => this.deps.layers.info(id)),
      env,
      workdir: rec.workdir && rec.workdir !== '/' ? rec.workdir : null,
      source,
    };
  }

  /**
   * The sandbox's mount points (/.sb for the agent, /workspace, /tmp, /etc/resolv.conf) on top of
   * an image that was not made for sandboxd, so that crun never creates them inside a layer.
   */
  private skeletonLayer(log: Log): Promise<LayerInfo> {
    return this.deps.layers.ensureLayer(
      sha256Hex('sandbox-skeleton/2'),
      async (tree) => {
        for (const d of ['.sb', 'workspace', 'etc']) await mkdir(join(tree, d), { mode: 0o755 });
        await mkdir(join(tree, 'tmp'));
        await chmod(join(tree, 'tmp'), 0o1777);
        await writeFile(join(tree, 'etc/resolv.conf'), '');
        const s = shiftOwnership(tree, CANONICAL_ID_OFFSET);
        return { kind: 'skeleton', sizeBytes: s.bytes, entries: s.entries };
      },
      log,
    );
  }
}

export function baseKey(layerIdsTopFirst: string[]): string {
  return sha256Hex(`base/1\n${layerIdsTopFirst.join('\n')}`);
}

/**
 * What the official python images have and Debian's python3 lacks: pip and python under
 * /usr/local/bin (clients call `/usr/local/bin/pip3`), and pip allowed to install system-wide
 * (Debian's EXTERNALLY-MANAGED marker is whited out). A layer to put on top of a bookworm rootfs
 * with python3 and python3-pip (the python:3.11 base; the built-in python templates may use it too).
 */
export function ensurePythonCompatLayer(layers: FsLayerStore, log: Log): Promise<LayerInfo> {
  return layers.ensureLayer(
    sha256Hex('python-compat/2'),
    async (tree) => {
      await mkdir(join(tree, 'usr/local/bin'), { recursive: true, mode: 0o755 });
      await mkdir(join(tree, 'usr/lib/python3.11'), { recursive: true, mode: 0o755 });
      for (const [name, target] of [
        ['python3', '/usr/bin/python3'],
        ['python', '/usr/bin/python3'],
        ['pip3', '/usr/bin/pip3'],
        ['pip', '/usr/bin/pip3'],
      ] as const) {
        await symlink(target, join(tree, 'usr/local/bin', name));
      }
      await runTool('mknod', ['-m', '000', join(tree, 'usr/lib/python3.11/EXTERNALLY-MANAGED'), 'c', '0', '0']);
      const s = shiftOwnership(tree, CANONICAL_ID_OFFSET);
      return { kind: 'python-compat', sizeBytes: s.bytes, entries: s.entries };
    },
    log,
  );
}
