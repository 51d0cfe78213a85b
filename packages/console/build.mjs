// Bundles the web console (served by the daemon at /console): src/main.ts and src/console.css,
// minified, under content-hashed names with gzip copies, and a manifest.json naming them.
// Output: packages/console/dist/console-ui/.
import { build } from 'esbuild';
import { createHash } from 'node:crypto';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, 'dist', 'console-ui');
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });

const manifest = { assets: {} };
for (const [logical, entry] of [
  ['console.js', 'src/main.ts'],
  ['console.css', 'src/console.css'],
]) {
  const r = await build({ entryPoints: [join(here, entry)], bundle: true, minify: true, format: 'iife', target: 'es2020', write: false, legalComments: 'none', logLevel: 'warning' });
  const body = Buffer.from(r.outputFiles[0].contents);
  const [base, ext] = logical.split('.');
  const name = `${base}.${createHash('sha256').update(body).digest('hex').slice(0, 16)}.${ext}`;
  writeFileSync(join(out, name), body);
  writeFileSync(join(out, `${name}.gz`), gzipSync(body, { level: 9 }));
  manifest.assets[logical] = name;
}
writeFileSync(join(out, 'manifest.json'), JSON.stringify(manifest, null, 2));
