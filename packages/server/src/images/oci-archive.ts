import { createHash, randomBytes } from 'node:crypto';
import { lstat, mkdir, readFile, realpath, stat } from 'node:fs/promises';
import { isAbsolute, join, normalize } from 'node:path';
import type { FsImageStore, ImageRecord } from './image-store.js';
import type { FsLayerStore, Log } from './layer-store.js';
import {
  MEDIA,
  checkPlatform,
  ensureOciLayers,
  parseImageConfig,
  pickPlatform,
  type ImageIndex,
  type ImageManifest,
} from './oci-image.js';
import { removeTreeWithMounts, runTool } from '../runtime/proc.js';
import { parseImageRef } from './refs.js';

export interface ImportDeps {
  layers: FsLayerStore;
  images: FsImageStore;
  /** Scratch space on the layers' filesystem (the archive is unpacked there first). */
  tmpDir: string;
  log: Log;
  signal?: AbortSignal;
}

interface Found {
  config: Buffer;
  layerPaths: string[];
  tags: string[];
}

/**
 * Imports a `docker save` archive or an OCI image-layout archive (tar, as written by `docker save`,
 * `podman save`, `skopeo copy ... oci-archive:`) as image `ref` (default: the archive's own tag).
 */
export async function importImageArchive(file: string, ref: string | undefined, deps: ImportDeps): Promise<ImageRecord> {
  const wanted = ref === undefined ? undefined : parseImageRef(ref);
  const tmp = join(deps.tmpDir, `.tmp-import-${process.pid}-${randomBytes(4).toString('hex')}`);
  await mkdir(tmp, { recursive: true, mode: 0o700 });
  try {
    deps.log(`unpacking ${file}`);
    // Only manifests and blobs live in the outer archive; never take owners or modes from it.
    await runTool('tar', ['-x', '-f', file, '-C', tmp, '--no-same-owner', '--no-same-permissions'], { signal: deps.signal });
    const found = (await exists(join(tmp, 'manifest.json')))
      ? await readDockerSave(tmp, wanted?.familiar)
      : await readOciLayout(tmp, wanted);
    const name = wanted?.familiar ?? (found.tags[0] ? parseImageRef(found.tags[0]).familiar : undefined);
    if (!name) throw new Error(`${file} names no image tag: give the reference to import it as`);
    for (const p of found.layerPaths) await regularFileInside(tmp, p);
    const config = parseImageConfig(found.config);
    checkPlatform(config, `${file}`);
    if (config.diffIds.length !== found.layerPaths.length) {
      throw new Error(`${file}: ${found.layerPaths.length} layers but the config lists ${config.diffIds.length} diff ids`);
    }
    const layerIds = await ensureOciLayers(deps.layers, config.diffIds, async (i) => found.layerPaths[i]!, deps.log, deps.signal);
    const record: ImageRecord = {
      ref: name,
      layers: layerIds,
      env: config.env,
      workdir: config.workdir,
      user: config.user,
      entrypoint: config.entrypoint,
      cmd: config.cmd,
      configDigest: `sha256:${createHash('sha256').update(found.config).digest('hex')}`,
      source: 'import',
      origin: file,
      createdAt: new Date().toISOString(),
    };
    await deps.images.put(record);
    deps.log(`imported ${name}: ${layerIds.length} layers`);
    return record;
  } finally {
    await removeTreeWithMounts(tmp);
  }
}

async function readDockerSave(dir: string, familiar: string | undefined): Promise<Found> {
  const manifest = JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8')) as Array<{
    Config: string;
    RepoTags?: string[] | null;
    Layers: string[];
  }>;
  const tagsOf = (m: (typeof manifest)[number]) => (m.RepoTags ?? []).map((t) => parseImageRef(t).familiar);
  const entry =
    (familiar ? manifest.find((m) => tagsOf(m).includes(familiar)) : undefined) ??
    (manifest.length === 1 ? manifest[0] : undefined);
  if (!entry) {
    const all = manifest.flatMap(tagsOf).join(', ');
    throw new Error(`the archive holds ${manifest.length} images (${all}); name the one to import`);
  }
  return {
    config: await readInside(dir, inside(dir, entry.Config)),
    layerPaths: entry.Layers.map((l) => inside(dir, l)),
    tags: tagsOf(entry),
  };
}

async function readOciLayout(dir: string, wanted: ReturnType<typeof parseImageRef> | undefined): Promise<Found> {
  if (!(await exists(join(dir, 'index.json')))) throw new Error('not a docker save or OCI image archive (no manifest.json or index.json)');
  const blob = (digest: string) => {
    const m = /^sha256:([0-9a-f]{64})$/.exec(digest);
    if (!m) throw new Error(`unsupported digest ${digest}`);
    return join(dir, 'blobs', 'sha256', m[1]!);
  };
  const index = JSON.parse(await readFile(join(dir, 'index.json'), 'utf8')) as ImageIndex;
  const refName = (d: ImageIndex['manifests'][number]) =>
    d.annotations?.['io.containerd.image.name'] ?? d.annotations?.['org.opencontainers.image.ref.name'];
  const matches = (d: ImageIndex['manifests'][number]) => {
    const n = refName(d);
    if (!n || !wanted) return false;
    return n === wanted.tag || (n.includes(':') || n.includes('/') ? parseImageRef(n).familiar === wanted.familiar : false);
  };
  let desc = index.manifests.find(matches) ?? (index.manifests.length === 1 ? index.manifests[0] : undefined);
  if (!desc) throw new Error(`the archive's index lists ${index.manifests.length} images; none is tagged ${wanted?.familiar ?? '(no tag given)'}`);
  const tagName = refName(desc);
  const tags = tagName && /[:/]/.test(tagName) ? [tagName] : [];
  for (let depth = 0; ; depth++) {
    const mediaType = desc.mediaType;
    if (mediaType === MEDIA.ociIndex || mediaType === MEDIA.dockerList) {
      if (depth > 3) throw new Error('nested image indexes too deep');
      desc = pickPlatform(JSON.parse(await readFile(blob(desc.digest), 'utf8')) as ImageIndex, 'the archive');
      continue;
    }
    const manifest = JSON.parse(await readFile(blob(desc.digest), 'utf8')) as ImageManifest;
    return {
      config: await readInside(dir, blob(manifest.config.digest)),
      layerPaths: manifest.layers.map((l) => blob(l.digest)),
      tags,
    };
  }
}

/** A path from an archive's manifest, refused if it points outside the unpacked archive. */
function inside(dir: string, rel: string): string {
  const n = normalize(rel);
  if (isAbsolute(n) || n.startsWith('..')) throw new Error(`archive manifest names a path outside the archive: ${rel}`);
  return join(dir, n);
}

/** Refuses symlinks (or symlinked parents) that would make the import read host files. */
async function regularFileInside(dir: string, p: string): Promise<void> {
  const real = await realpath(p);
  const root = await realpath(dir);
  if (!real.startsWith(root + '/') || !(await lstat(real)).isFile()) throw new Error(`archive member ${p.slice(dir.length + 1)} is not a regular file inside the archive`);
}

async function readInside(dir: string, p: string): Promise<Buffer> {
  await regularFileInside(dir, p);
  return readFile(p);
}

async function exists(p: string): Promise<boolean> {
  return stat(p).then(
    () => true,
    () => false,
  );
}
