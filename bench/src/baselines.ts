// Baselines the benchmarks measure in their own run: a bare crun container of the same rootfs.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { TEST_DATA_DIR } from '../../e2e/dist/harness.js';

/** A bare crun container: overlay of the same layer, default `crun spec`, `sleep infinity`. */
export function bareCrunSamples(layerDir: string, n: number): { run: number[]; del: number[] } {
  const dir = join(TEST_DATA_DIR, 'bench-bare');
  const root = join(dir, 'crun-root');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(join(dir, 'bundle'), { recursive: true });
  execFileSync('crun', ['spec'], { cwd: join(dir, 'bundle') });
  const spec = JSON.parse(readFileSync(join(dir, 'bundle/config.json'), 'utf8'));
  spec.process.args = ['/bin/sleep', 'infinity'];
  spec.process.terminal = false;
  spec.root = { path: join(dir, 'merged'), readonly: false };
  writeFileSync(join(dir, 'bundle/config.json'), JSON.stringify(spec));
  const run: number[] = [];
  const del: number[] = [];
  for (let i = 0; i < n; i++) {
    for (const d of ['upper', 'work', 'merged']) mkdirSync(join(dir, d), { recursive: true });
    execFileSync('mount', ['-t', 'overlay', 'overlay', '-o', `lowerdir=${layerDir},upperdir=${dir}/upper,workdir=${dir}/work`, join(dir, 'merged')]);
    try {
      const t0 = performance.now();
      const r = spawnSync('crun', ['--root', root, 'run', '-d', '--bundle', join(dir, 'bundle'), `bare${i}`], { stdio: 'ignore' });
      run.push(performance.now() - t0);
      if (r.status !== 0) throw new Error('bare crun run failed');
      const t1 = performance.now();
      spawnSync('crun', ['--root', root, 'delete', '-f', `bare${i}`], { stdio: 'ignore' });
      del.push(performance.now() - t1);
    } finally {
      execFileSync('umount', [join(dir, 'merged')]);
      for (const d of ['upper', 'work']) rmSync(join(dir, d), { recursive: true, force: true });
    }
  }
  rmSync(dir, { recursive: true, force: true });
  return { run, del };
}

