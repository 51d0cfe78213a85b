import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, chownSync, mkdirSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';

/** Synthetic two-layer image whose second layer deletes a file and replaces a directory. Its tars are reproducible (sorted, mtime 0): equal content, equal diff ids. */
export interface SyntheticImage {
  /** Uncompressed layer tars, bottom first. */
  layers: Buffer[];
  diffIds: string[];
  config: Buffer;
  configDigest: string;
}

export const sha256 = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

/**
 * Layer 1: etc/keep, etc/gone, opq/old1, opq/sub/old2, home/user/file (uid 1000), usr/bin/su
 * (setuid), bin -> usr/bin, dev/sda (block device, must be dropped).
 * Layer 2: etc/.wh.gone, opq/.wh..wh..opq, opq/new1, newfile, and a `.wh.newfile2` next to a
 * re-created newfile2 (the entry must win).
 */
export function makeSyntheticImage(scratch: string, opts: { arch?: string; env?: string[] } = {}): SyntheticImage {
  const l1 = join(scratch, 'stage1');
  mkdirSync(join(l1, 'etc'), { recursive: true });
  writeFileSync(join(l1, 'etc/keep'), 'keep');
  writeFileSync(join(l1, 'etc/gone'), 'gone');
  mkdirSync(join(l1, 'opq/sub'), { recursive: true });
  writeFileSync(join(l1, 'opq/old1'), 'old1');
  writeFileSync(join(l1, 'opq/sub/old2'), 'old2');
  mkdirSync(join(l1, 'home/user'), { recursive: true });
  writeFileSync(join(l1, 'home/user/file'), 'mine');
  chownSync(join(l1, 'home/user/file'), 1000, 1000);
  chownSync(join(l1, 'home/user'), 1000, 1000);
  mkdirSync(join(l1, 'usr/bin'), { recursive: true });
  writeFileSync(join(l1, 'usr/bin/su'), '#!/bin/sh\n');
  chmodSync(join(l1, 'usr/bin/su'), 0o4755);
  symlinkSync('usr/bin', join(l1, 'bin'));
  mkdirSync(join(l1, 'dev'));
  execFileSync('mknod', [join(l1, 'dev/sda'), 'b', '8', '0']);

  const l2 = join(scratch, 'stage2');
  mkdirSync(join(l2, 'etc'), { recursive: true });
  writeFileSync(join(l2, 'etc/.wh.gone'), '');
  mkdirSync(join(l2, 'opq'));
  writeFileSync(join(l2, 'opq/.wh..wh..opq'), '');
  writeFileSync(join(l2, 'opq/new1'), 'new1');
  writeFileSync(join(l2, 'newfile'), 'new');
  writeFileSync(join(l2, '.wh.newfile2'), '');
  writeFileSync(join(l2, 'newfile2'), 'again');

  const tarOf = (dir: string) => execFileSync('tar', ['-c', '-f', '-', '--numeric-owner', '--sort=name', '--mtime=@0', '-C', dir, '.'], { maxBuffer: 1 << 26 });
  const layers = [tarOf(l1), tarOf(l2)];
  const diffIds = layers.map((l) => `sha256:${sha256(l)}`);
  const config = Buffer.from(
    JSON.stringify({
      architecture: opts.arch ?? 'amd64',
      os: 'linux',
      config: { Env: opts.env ?? ['PATH=/usr/local/bin:/usr/bin:/bin', 'LANG=C.UTF-8'], WorkingDir: '/srv', Cmd: ['/bin/sh'] },
      rootfs: { type: 'layers', diff_ids: diffIds },
    }),
  );
  return { layers, diffIds, config, configDigest: `sha256:${sha256(config)}` };
}

/** `docker save` layout: manifest.json + <config>.json + <n>/layer.tar (uncompressed). */
export function writeDockerSave(img: SyntheticImage, dir: string, tag: string, out: string): void {
  mkdirSync(dir, { recursive: true });
  const cfgName = `${img.configDigest.slice(7)}.json`;
  writeFileSync(join(dir, cfgName), img.config);
  const layerPaths = img.layers.map((l, i) => {
    mkdirSync(join(dir, `l${i}`));
    writeFileSync(join(dir, `l${i}/layer.tar`), l);
    return `l${i}/layer.tar`;
  });
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify([{ Config: cfgName, RepoTags: [tag], Layers: layerPaths }]));
  execFileSync('tar', ['-c', '-f', out, '-C', dir, '.']);
}

/** OCI image layout with gzip layers behind a one-platform index, tagged via ref.name. */
export function writeOciLayout(img: SyntheticImage, dir: string, tag: string, out: string): void {
  const blobs = join(dir, 'blobs/sha256');
  mkdirSync(blobs, { recursive: true });
  const put = (b: Buffer) => {
    const d = sha256(b);
    writeFileSync(join(blobs, d), b);
    return { digest: `sha256:${d}`, size: b.length };
  };
  const gz = img.layers.map((l) => gzipSync(l));
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...put(img.config) },
      layers: gz.map((g) => ({ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', ...put(g) })),
    }),
  );
  const inner = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.oci.image.index.v1+json',
      manifests: [{ mediaType: 'application/vnd.oci.image.manifest.v1+json', ...put(manifest), platform: { os: 'linux', architecture: 'amd64' } }],
    }),
  );
  writeFileSync(
    join(dir, 'index.json'),
    JSON.stringify({
      schemaVersion: 2,
      manifests: [{ mediaType: 'application/vnd.oci.image.index.v1+json', ...put(inner), annotations: { 'org.opencontainers.image.ref.name': tag } }],
    }),
  );
  writeFileSync(join(dir, 'oci-layout'), '{"imageLayoutVersion":"1.0.0"}');
  execFileSync('tar', ['-c', '-f', out, '-C', dir, '.']);
}

export function readXattr(path: string, name: string): string | undefined {
  try {
    return execFileSync('getfattr', ['-h', '--only-values', '-n', name, path], { stdio: ['ignore', 'pipe', 'ignore'] }).toString();
  } catch {
    return undefined;
  }
}


/**
 * A runnable single-layer image: the host's static busybox with a symlink per applet and a root
 * user, as a docker-save archive tagged `tag` (the test decides what store name it gets).
 */
export function writeBusyboxImage(scratch: string, tag: string, out: string): SyntheticImage {
  const stage = join(scratch, 'busybox-stage');
  mkdirSync(join(stage, 'bin'), { recursive: true });
  mkdirSync(join(stage, 'etc'));
  mkdirSync(join(stage, 'root'));
  execFileSync('cp', ['/usr/bin/busybox', join(stage, 'bin/busybox')]);
  const applets = execFileSync('/usr/bin/busybox', ['--list']).toString().split('\n').filter((a) => a && a !== 'busybox');
  for (const a of applets) symlinkSync('busybox', join(stage, 'bin', a));
  writeFileSync(join(stage, 'etc/passwd'), 'root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n');
  writeFileSync(join(stage, 'etc/group'), 'root:x:0:\nuser:x:1000:\n');
  const layer = execFileSync('tar', ['-c', '-f', '-', '--numeric-owner', '-C', stage, '.'], { maxBuffer: 1 << 27 });
  const diffIds = [`sha256:${sha256(layer)}`];
  const config = Buffer.from(
    JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      config: { Env: ['PATH=/bin', 'IMAGE_MARK=busybox'], Cmd: ['/bin/sh'] },
      rootfs: { type: 'layers', diff_ids: diffIds },
    }),
  );
  const img = { layers: [layer], diffIds, config, configDigest: `sha256:${sha256(config)}` };
  writeDockerSave(img, join(scratch, 'busybox-save'), tag, out);
  return img;
}
