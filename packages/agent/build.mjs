// Builds what ships into every sandbox (read-only, at /.sb/agent): the agent bundled into one file,
// the Python bootstrap beside it, and sbx-helper, a static C binary (process supervisor and PTY)
// that runs on any base image. Output: packages/agent/bundle/.
import { build } from 'esbuild';
import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, mkdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, 'bundle');
mkdirSync(out, { recursive: true });

/**
 * Builds one self-contained file and puts it in place with a rename: sandboxes booting meanwhile
 * (tests and benchmarks of others on this machine) read the old file or the new, never half of one.
 */
async function buildAtomically(options) {
  const result = await build({ ...options, write: false });
  for (const file of result.outputFiles) {
    const tmp = `${file.path}.tmp-${process.pid}`;
    writeFileSync(tmp, file.contents, { mode: 0o644 });
    renameSync(tmp, file.path);
  }
}

// ws's optional native speed-ups are bundled as modules that throw (see below).
const absentOptionalModules = {
  name: 'absent-optional-modules',
  setup(b) {
    b.onResolve({ filter: /^(bufferutil|utf-8-validate)$/ }, (args) => ({ path: args.path, namespace: 'absent' }));
    b.onLoad({ filter: /.*/, namespace: 'absent' }, (args) => ({
      contents: `throw new Error(${JSON.stringify(`${args.path} is not part of the agent`)});`,
      loader: 'js',
    }));
  },
};

// E2B's Connect protocol is spoken by the daemon's gateway now; what earlier builds left here goes.
for (const stale of ['envd.cjs', 'envd.cjs.v8cache']) rmSync(join(out, stale), { force: true });

await buildAtomically({
  entryPoints: [join(here, 'src/main.ts')],
  outfile: join(out, 'agent.cjs'),
  bundle: true,
  platform: 'node',
  target: 'node18',
  format: 'cjs',
  minify: false,
  sourcemap: false,
  legalComments: 'none',
  logLevel: 'warning',
  // `ws` tries to require optional native speed-ups (bufferutil, utf-8-validate) and works without
  // them. Left external, Node would look them up at run time in /.sb/node_modules, /node_modules and
  // ~/.node_modules, which root in the sandbox writes: its code ran in the agent at the first
  // WebSocket. They are bundled as modules that throw, so the agent never resolves a module at run
  // time (agent-bundle.test.ts checks that every require left is a Node built-in).
  plugins: [absentOptionalModules],
});

// The JavaScript kernel of code contexts: run by the image's node (which may be as old as 18) or the
// agent's own runtime, so one self-contained CommonJS file too.
await buildAtomically({
  entryPoints: [join(here, 'src/kernel-js/main.ts')],
  outfile: join(out, 'sbx_kernel_js.cjs'),
  bundle: true,
  platform: 'node',
  target: 'node18',
  format: 'cjs',
  legalComments: 'none',
  logLevel: 'warning',
});

for (const f of ['sbx_run.py', 'sbx_charts.py', 'sbx_zygote.py', 'sbx_kernel.py']) copyFileSync(join(here, 'py', f), join(out, f));

/** Compiles a static helper unless it is newer than its sources; `mode` is the file's mode. */
function compileStatic(name, sources, headers, mode, missing) {
  const src = sources.map((f) => join(here, 'native', f));
  const outFile = join(out, name);
  const upToDate = (() => {
    try {
      const built = statSync(outFile).mtimeMs;
      return [...src, ...headers.map((f) => join(here, 'native', f))].every((f) => built >= statSync(f).mtimeMs);
    } catch {
      return false;
    }
  })();
  if (upToDate) return chmodSync(outFile, mode);
  const cc = process.env.CC || 'gcc';
  try {
    execFileSync(cc, ['-static', '-Os', '-s', '-Wall', '-Wextra', '-o', `${outFile}.tmp`, ...src], { stdio: 'inherit' });
    chmodSync(`${outFile}.tmp`, mode);
    execFileSync('mv', ['-f', `${outFile}.tmp`, outFile]);
  } catch (err) {
    rmSync(`${outFile}.tmp`, { force: true });
    console.warn(`agent build: could not compile ${name} with ${cc} -static: ${err.message}; ${missing}`);
  }
}

// The agent still runs without it (no terminal; timeouts kill only the process group).
compileStatic('sbx-helper', ['sbx-helper.c', 'watch.c'], ['watch.h'], 0o755, 'no terminal, no file watching');
// Execute-only: it holds the agent's listening socket, so like the agent's loader it must be a file
// the sandbox cannot read (see native/sbx-first.c). Without it, Node alone answers (slower boots).
compileStatic('sbx-first', ['sbx-first.c'], [], 0o711, 'cold boots wait for Node');
