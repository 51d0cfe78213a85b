import { stat } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Sandbox } from '@sandboxd/sdk';
import { parseCpEndpoint, UsageError } from '../args.js';
import type { Command, Context } from '../command.js';
import { bytes, json } from '../output.js';

/** A progress line on a terminal's stderr, at most ~10 updates a second. */
function progress(ctx: Context, label: string): { update: (n: number) => void; done: () => void } {
  if (!ctx.io.stderr.isTTY || ctx.json) return { update: () => {}, done: () => {} };
  let last = 0;
  let shown = false;
  return {
    update: (n) => {
      const now = Date.now();
      if (now - last < 100) return;
      last = now;
      shown = true;
      ctx.io.stderr.write(`\r${label} ${bytes(n)}\x1b[K`);
    },
    done: () => {
      if (shown) ctx.io.stderr.write('\r\x1b[K');
    },
  };
}

async function isDir(path: string): Promise<boolean> {
  return stat(path).then(
    (s) => s.isDirectory(),
    () => false,
  );
}

export const cp: Command = {
  name: 'cp',
  summary: 'copy a file or a directory into or out of a sandbox (streamed)',
  args: 'SOURCE DEST',
  details:
    'One side is ID:/path (a path in the sandbox), the other a local path or - for stdin/stdout.\n' +
    'A destination ending in / (or an existing directory) gets the source\'s name inside it.\n' +
    'Directories are copied whole (as a tar stream; the image needs tar) and merged into an existing one.\n' +
    'Write a local name containing a colon as ./name:with:colons.',
  examples: ['sbx cp ./data.csv $ID:/workspace/', 'sbx cp $ID:/workspace/out.png ./out.png', 'sbx cp ./project $ID:/workspace/', 'sbx cp $ID:/workspace/results ./results', 'tar cz src | sbx cp - $ID:/tmp/src.tgz'],
  options: {},
  minArgs: 2,
  maxArgs: 2,
  async run(ctx, { positionals }) {
    const src = parseCpEndpoint(positionals[0]!);
    const dst = parseCpEndpoint(positionals[1]!);
    if (src.kind === 'remote' && dst.kind === 'remote') throw new UsageError('copying between two sandboxes is not supported; copy through a local file', 'cp');
    if (src.kind !== 'remote' && dst.kind !== 'remote') throw new UsageError('one side must be a sandbox path, ID:/path', 'cp');

    if (dst.kind === 'remote') {
      const sb = Sandbox.fromId(dst.sandboxId, { client: ctx.client });
      const srcName = src.kind === 'local' ? basename(src.path) : 'stdin';
      if (src.kind === 'local' && (await isDir(src.path))) {
        const into = dst.path.endsWith('/') || (await sb.files.isDirectory(dst.path, { signal: ctx.signal }));
        const remoteDir = into ? `${dst.path.replace(/\/+$/, '')}/${basename(src.path)}` : dst.path;
        const p = progress(ctx, `upload ${remoteDir}/`);
        try {
          const r = await sb.files.uploadDirectory(src.path, remoteDir, { signal: ctx.signal, onProgress: p.update });
          p.done();
          if (ctx.json) ctx.out(json({ source: positionals[0], destination: `${dst.sandboxId}:${r.path}`, bytes: r.size }));
          return 0;
        } finally {
          p.done();
        }
      }
      const remote = dst.path.endsWith('/') ? dst.path + srcName : dst.path;
      const p = progress(ctx, `upload ${remote}`);
      try {
        const r =
          src.kind === 'local'
            ? await sb.files.uploadFile(src.path, remote, { signal: ctx.signal, onProgress: p.update })
            : await sb.files.upload(remote, ctx.io.stdin as NodeJS.ReadableStream, { signal: ctx.signal, onProgress: p.update });
        p.done();
        if (ctx.json) ctx.out(json({ source: positionals[0], destination: `${dst.sandboxId}:${r.path}`, bytes: r.size }));
        return 0;
      } finally {
        p.done();
      }
    }

    const remote = src as Extract<typeof src, { kind: 'remote' }>;
    const sb = Sandbox.fromId(remote.sandboxId, { client: ctx.client });
    if (await sb.files.isDirectory(remote.path, { signal: ctx.signal })) {
      if (dst.kind === 'stdio') throw new UsageError(`${remote.path} is a directory; copy it to a local path`, 'cp');
      const local = dst.path.endsWith('/') || (await isDir(dst.path)) ? join(dst.path, basename(remote.path) || 'root') : dst.path;
      const p = progress(ctx, `download ${remote.path}/`);
      try {
        const r = await sb.files.downloadDirectory(remote.path, local, { signal: ctx.signal, onProgress: p.update });
        p.done();
        if (ctx.json) ctx.out(json({ source: positionals[0], destination: r.path, files: r.files, bytes: r.size }));
        return 0;
      } finally {
        p.done();
      }
    }
    if (dst.kind === 'stdio') {
      const stream = await sb.files.downloadStream(remote.path, { signal: ctx.signal });
      await pipeline(stream, ctx.io.stdout, { end: false });
      return 0;
    }
    const local = dst.path.endsWith('/') || (await isDir(dst.path)) ? join(dst.path, basename(remote.path)) : dst.path;
    const p = progress(ctx, `download ${remote.path}`);
    try {
      const r = await sb.files.downloadFile(remote.path, local, { signal: ctx.signal, onProgress: p.update });
      p.done();
      if (ctx.json) ctx.out(json({ source: positionals[0], destination: r.path, bytes: r.size }));
      return 0;
    } finally {
      p.done();
    }
  },
};
