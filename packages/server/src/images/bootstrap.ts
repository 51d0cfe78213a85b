import { randomBytes } from 'node:crypto';
import { lstat, mkdir, readFile, readlink, rmdir } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { runTool } from '../runtime/proc.js';
import type { LayerInfo } from './types.js';

/**
 * What each built-in's description promises, checked by reading the built tree (never by running
 * anything from it on the host): files that must exist, and dpkg package versions.
 */
export interface TemplateClaims {
  files: string[];
  /** package name → pattern its installed version must match. */
  packages: Record<string, RegExp>;
}

const PY = ['usr/bin/python3.11', 'usr/bin/pip3', 'usr/lib/python3.11/venv/__init__.py', 'usr/lib/python3.11/ensurepip/__init__.py'];
const BASE = ['usr/bin/bash', 'usr/bin/curl', 'usr/bin/ps', 'etc/ssl/certs/ca-certificates.crt', 'workspace', 'tmp', 'home/user'];

export const BUILTIN_CLAIMS: Record<string, TemplateClaims> = {
  base: { files: BASE, packages: { 'base-files': /^12(\.|$)/, bash: /^5\./ } },
  python: { files: [...BASE, ...PY], packages: { python3: /^3\.11\./, 'python3.11': /^3\.11\./ } },
  nodejs: { files: [...BASE, 'usr/bin/node', 'usr/bin/npm'], packages: { nodejs: /^18\./ } },
  go: { files: [...BASE, 'usr/bin/go', 'usr/bin/gofmt', 'usr/bin/git'], packages: { 'golang-go': /^2:1\.19/, 'golang-1.19-go': /^1\.19\./ } },
  'code-interpreter': {
    files: [
      ...BASE,
      ...PY,
      'usr/lib/python3/dist-packages/numpy/__init__.py',
      'usr/lib/python3/dist-packages/pandas/__init__.py',
      'usr/lib/python3/dist-packages/matplotlib/__init__.py',
      'usr/bin/node',
      'usr/bin/go',
    ],
    packages: {
      'python3.11': /^3\.11\./,
      'python3-numpy': /^1:1\./,
      'python3-pandas': /^1\./,
      'python3-matplotlib': /^3\./,
      nodejs: /^18\./,
      'golang-1.19-go': /^1\.19\./,
    },
  },
  desktop: {
    files: [
      ...BASE,
      ...PY,
      'usr/bin/Xvfb',
      'usr/bin/xfce4-session',
      'usr/bin/x11vnc',
      'usr/bin/websockify',
      'usr/share/novnc/vnc.html',
      'usr/bin/xdotool',
      'usr/bin/scrot',
      'usr/bin/xclip',
      'usr/bin/wmctrl',
      'usr/bin/xrandr',
      'usr/bin/ffmpeg',
      'usr/bin/tesseract',
      'usr/bin/chromium',
      'usr/bin/mousepad',
      'usr/bin/xfce4-terminal',
    ],
    packages: { xvfb: /^2:21\./, xfce4: /^4\.18/, chromium: /./, 'tesseract-ocr': /^5\./ },
  },
};

/**
 * Problems found in a stack of layers (top-most first), read through a read-only overlay of them
 * as a sandbox sees it (whiteouts hide what they hide); a stack of one is read as it is.
 */
export async function checkStackClaims(stack: LayerInfo[], scratchRoot: string, claims: TemplateClaims | undefined): Promise<string[]> {
  if (!claims) return [];
  if (stack.length === 1) return checkClaims(stack[0]!.path, claims);
  // Named as the layer store names its temporary dirs: a leftover (mount and all) is removed by its cleanupStale.
  const dir = join(scratchRoot, `.tmp-${stack[0]!.id}-${process.pid}-claims-${randomBytes(4).toString('hex')}`);
  await mkdir(dir, { mode: 0o700 });
  try {
    await runTool('mount', ['-t', 'overlay', 'overlay', '-o', `ro,lowerdir=${stack.map((l) => l.path).join(':')}`, dir]);
    try {
      return await checkClaims(dir, claims);
    } finally {
      await runTool('umount', [dir]);
    }
  } finally {
    await rmdir(dir).catch(() => undefined);
  }
}

/** Problems found (empty when the tree has everything claimed). */
export async function checkClaims(tree: string, claims: TemplateClaims | undefined): Promise<string[]> {
  if (!claims) return [];
  const problems: string[] = [];
  for (const f of claims.files) {
    if (!(await existsInTree(tree, f))) problems.push(`missing /${f}`);
  }
  const installed = await dpkgVersions(tree);
  for (const [pkg, re] of Object.entries(claims.packages)) {
    const v = installed.get(pkg);
    if (v === undefined) problems.push(`package ${pkg} not installed`);
    else if (!re.test(v)) problems.push(`package ${pkg} is ${v}, expected ${re}`);
  }
  return problems;
}

/** Installed package → version, from the tree's dpkg status file. */
export async function dpkgVersions(tree: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  const text = await readFile(posix.join(tree, 'var/lib/dpkg/status'), 'utf8').catch(() => '');
  for (const stanza of text.split('\n\n')) {
    const pkg = /^Package: (.+)$/m.exec(stanza)?.[1];
    const ver = /^Version: (.+)$/m.exec(stanza)?.[1];
    const ok = /^Status: .* installed$/m.test(stanza);
    if (pkg && ver && ok) out.set(pkg, ver);
  }
  return out;
}

/**
 * Whether `rel` exists inside `tree`, following symlinks as the sandbox would see them: an absolute
 * link target is resolved against the tree, never against the host's root.
 */
export async function existsInTree(tree: string, rel: string): Promise<boolean> {
  const parts = rel.split('/').filter(Boolean);
  const resolved: string[] = [];
  for (let hops = 0; parts.length > 0; ) {
    const name = parts.shift()!;
    if (name === '.') continue;
    if (name === '..') {
      resolved.pop();
      continue;
    }
    const host = posix.join(tree, ...resolved, name);
    const st = await lstat(host).catch(() => undefined);
    if (!st) return false;
    if (st.isSymbolicLink()) {
      if (++hops > 40) return false;
      const target = await readlink(host);
      if (target.startsWith('/')) resolved.length = 0;
      parts.unshift(...target.split('/').filter(Boolean));
      continue;
    }
    resolved.push(name);
  }
  return true;
}
