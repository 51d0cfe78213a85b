// Bundles the web console (served by the daemon at /console): src/main.ts as an ES module with
// the terminal (xterm.js) split into chunks loaded only when a terminal opens, and
// src/console.css (with xterm's styles); minified, under content-hashed names with gzip copies,
// and a manifest.json naming them. Output: packages/console/dist/console-ui/.
import { build } from 'esbuild';
import { readFileSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, 'dist', 'console-ui');
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });

const r = await build({
  absWorkingDir: here,
  entryPoints: { console: 'src/main.ts', 'console-style': 'src/console.css' },
  bundle: true,
  minify: true,
  format: 'esm',
  splitting: true,
  target: 'es2020',
  outdir: out,
  entryNames: '[name].[hash]',
  chunkNames: 'chunk.[hash]',
  metafile: true,
  legalComments: 'none',
  logLevel: 'warning',
});

// Logical names for the entries (what the page links); chunks are named by their own file name.
const manifest = { assets: {} };
for (const [file, meta] of Object.entries(r.metafile.outputs)) {
  const name = basename(file);
  const logical = meta.entryPoint === 'src/main.ts' ? 'console.js' : meta.entryPoint === 'src/console.css' ? 'console.css' : name;
  if (!/\.(js|css)$/.test(name)) continue;
  writeFileSync(join(out, `${name}.gz`), gzipSync(readFileSync(join(out, name)), { level: 9 }));
  manifest.assets[logical] = name;
}
writeFileSync(join(out, 'manifest.json'), JSON.stringify(manifest, null, 2));
