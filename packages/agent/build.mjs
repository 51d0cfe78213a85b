// Builds what ships into every sandbox (read-only, at /.sb/agent): the agent bundled into one file,
// the Python bootstrap beside it, and sbx-helper, a static C binary (process supervisor and PTY)
// that runs on any base image. Output: packages/agent/bundle/.
import { build } from 'esbuild';
import { execFileSync } from 'node:child_process';
import { copyFileSync, mkdirSync, rmSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, 'bundle');
mkdirSync(out, { recursive: true });

await build({
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
  plugins: [
    {
      name: 'absent-optional-modules',
      setup(b) {
        b.onResolve({ filter: /^(bufferutil|utf-8-validate)$/ }, (args) => ({ path: args.path, namespace: 'absent' }));
        b.onLoad({ filter: /.*/, namespace: 'absent' }, (args) => ({
          contents: `throw new Error(${JSON.stringify(`${args.path} is not part of the agent`)});`,
          loader: 'js',
        }));
      },
    },
  ],
});

// The JavaScript kernel of code contexts: run by the image's node (which may be as old as 18) or the
// agent's own runtime, so one self-contained CommonJS file too.
await build({
  entryPoints: [join(here, 'src/kernel-js/main.ts')],
  outfile: join(out, 'sbx_kernel_js.cjs'),
  bundle: true,
  platform: 'node',
  target: 'node18',
  format: 'cjs',
  legalComments: 'none',
  logLevel: 'warning',
});

for (const f of ['sbx_run.py', 'sbx_zygote.py', 'sbx_kernel.py']) copyFileSync(join(here, 'py', f), join(out, f));

const helperSrc = ['sbx-helper.c', 'watch.c'].map((f) => join(here, 'native', f));
const helperOut = join(out, 'sbx-helper');
const upToDate = (() => {
  try {
    const built = statSync(helperOut).mtimeMs;
    return [...helperSrc, join(here, 'native/watch.h')].every((f) => built >= statSync(f).mtimeMs);
  } catch {
    return false;
  }
})();
if (!upToDate) {
  const cc = process.env.CC || 'gcc';
  try {
    execFileSync(cc, ['-static', '-Os', '-s', '-Wall', '-Wextra', '-o', `${helperOut}.tmp`, ...helperSrc], { stdio: 'inherit' });
    execFileSync('mv', ['-f', `${helperOut}.tmp`, helperOut]);
  } catch (err) {
    rmSync(`${helperOut}.tmp`, { force: true });
    // The agent still runs without it (no terminal; timeouts kill only the process group).
    console.warn(`agent build: could not compile sbx-helper with ${cc} -static: ${err.message}`);
  }
}
