// Bundles the API reference UI served at /docs (no CDN): Swagger UI's prebuilt bundle and styles
// from the swagger-ui-dist package, and our initializer, copied under content-hashed names (served
// as immutable) with gzip copies beside them. Output: packages/server/dist/docs-ui/ and its
// manifest.json, which the daemon reads at start (without it, /docs is a plain HTML reference).
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, 'dist', 'docs-ui');
const dist = dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));
const assets = {
  'bundle.js': join(dist, 'swagger-ui-bundle.js'),
  'styles.css': join(dist, 'swagger-ui.css'),
  'init.js': join(here, 'docs-ui', 'init.js'),
};

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const manifest = {};
for (const [logical, file] of Object.entries(assets)) {
  // Source maps stay out: they would name files of this machine and are not served.
  const body = Buffer.from(readFileSync(file, 'utf8').replace(/\n\/\/# sourceMappingURL=\S+\s*$/, '\n').replace(/\n\/\*# sourceMappingURL=\S+?\s*\*\/\s*$/, '\n'));
  const hash = createHash('sha256').update(body).digest('hex').slice(0, 16);
  const [base, ext] = logical.split('.');
  const name = `${base}.${hash}.${ext}`;
  writeFileSync(join(out, name), body);
  writeFileSync(join(out, `${name}.gz`), gzipSync(body, { level: 9 }));
  manifest[logical] = name;
}
const version = JSON.parse(readFileSync(join(dist, 'package.json'), 'utf8')).version;
writeFileSync(join(out, 'manifest.json'), JSON.stringify({ swaggerUi: version, assets: manifest }, null, 2));
