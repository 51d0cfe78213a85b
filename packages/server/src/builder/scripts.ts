import type { CopyInput } from './types.js';
import type { BuildStep } from './types.js';

/** Where a COPY step's inputs are bind-mounted (read-only) inside the step's container. */
export const STEP_INPUT_DIR = '/.sb/in';

/** POSIX shell single-quoting. */
export function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

/**
 * A sh pattern matching `s` literally except for its glob characters (so `src/*.py` globs but a
 * space or quote in a name is just a character).
 */
export function globWord(s: string): string {
  return s.replace(/[^A-Za-z0-9*?[\]/._+@%=:,-]/g, (c) => `\\${c}`);
}

/** `run`: Docker's `sh -c`, in the working directory (created if missing, as WORKDIR does). */
export function runArgv(command: string, workdir: string | null): string[] {
  if (!workdir) return ['/bin/sh', '-c', command];
  return ['/bin/sh', '-c', 'mkdir -p -- "$0" && cd -- "$0" && exec /bin/sh -c "$1"', workdir, command];
}

const APT_SCRIPT = `set -e
if command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "$@"
  apt-get clean
  rm -rf /var/lib/apt/lists/*
elif command -v apk >/dev/null 2>&1; then
  apk add --no-cache "$@"
else
  echo "apt step: this image has neither apt-get nor apk" >&2
  exit 127
fi`;

/** `apt`: apt-get on Debian-family images (apk on Alpine), lists removed so they stay out of the layer. */
export function aptArgv(packages: string[]): string[] {
  return ['/bin/sh', '-c', APT_SCRIPT, 'apt', ...packages];
}

/**
 * `copy`, run inside the step's container so that untrusted archives are unpacked under the
 * sandbox's isolation and symlinks resolve as in the image. Docker's COPY rules: a directory's
 * contents go into dest; one file to a dest that is not a directory (and does not end in `/`)
 * becomes dest; otherwise files go into dest. Files are owned by root unless `owner` is given.
 */
export function copyArgv(step: Extract<BuildStep, { type: 'copy' }>, inputs: CopyInput[], workdir: string | null): string[] {
  const dest = step.dest.startsWith('/') ? step.dest : `${workdir ?? '/'}/${step.dest}`;
  const lines = [
    'set -e',
    `dest=${shq(dest)}`,
    'list=/tmp/.sb-copied',
    ': > "$list"',
    // into_dir SRC_DIR: merge a directory's contents into dest, recording every path made.
    'into_dir() { mkdir -p "$dest"; cp -a "$1"/. "$dest"/; (cd "$1" && find . -mindepth 1) | while IFS= read -r p; do echo "$dest/${p#./}"; done >> "$list"; }',
    // place SRC MANY: one file or directory per Docker's rules.
    'place() { if [ -d "$1" ] && [ ! -L "$1" ]; then into_dir "$1"; return; fi; ' +
      'if [ "$2" = 1 ] || [ "${dest%/}" != "$dest" ] || [ -d "$dest" ]; then mkdir -p "$dest"; t="${dest%/}/${3:-${1##*/}}"; ' +
      'else mkdir -p "$(dirname "$dest")"; t="$dest"; fi; ' +
      'if [ -n "$3" ]; then cp "$1" "$t"; chmod 0644 "$t"; else cp -a "$1" "$t"; fi; echo "$t" >> "$list"; }',
  ];
  const tarballs = inputs.map((c, j) => ({ c, j })).filter((x) => x.c.kind === 'tarball');
  const files = inputs.map((c, j) => ({ c, j })).filter((x) => x.c.kind === 'file');
  if (tarballs.length > 0) {
    lines.push('ctx=/tmp/.sb-ctx', 'rm -rf "$ctx"', 'mkdir -p "$ctx"');
    for (const { j } of tarballs) lines.push(`tar -x -z -o -f ${STEP_INPUT_DIR}/${j} -C "$ctx"`);
    const patterns = step.srcPaths.length > 0 ? step.srcPaths : ['.'];
    const words = patterns.map((p) => globWord(p.replace(/^\/+/, '') || '.')).join(' ');
    lines.push(
      'cd "$ctx"',
      'n=0',
      `for s in ${words}; do`,
      '  if [ ! -e "$s" ] && [ ! -L "$s" ]; then echo "copy step: $s: no such file or directory in the uploaded files" >&2; exit 1; fi',
      '  n=$((n+1))',
      'done',
      'many=0; [ "$n" -gt 1 ] && many=1',
      `for s in ${words}; do if [ "$s" = . ]; then into_dir "$ctx"; else place "$ctx/$s" "$many" ""; fi; done`,
      'cd /',
      'rm -rf "$ctx"',
    );
  }
  const many = files.length + tarballs.length > 1 ? 1 : 0;
  for (const { c, j } of files) lines.push(`place ${STEP_INPUT_DIR}/${j} ${many} ${shq(c.name)}`);
  if (step.owner) lines.push(`while IFS= read -r p; do chown -h ${shq(step.owner)} "$p"; done < "$list"`);
  if (step.permissions) lines.push(`while IFS= read -r p; do [ -L "$p" ] || chmod ${shq(step.permissions)} "$p"; done < "$list"`);
  lines.push('rm -f "$list"');
  return ['/bin/sh', '-c', lines.join('\n')];
}
