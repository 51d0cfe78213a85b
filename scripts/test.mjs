// The whole test suite: warm the image cache, run every tier with node's test runner, then check
// that nothing leaked (containers, mounts, loop devices, network namespaces, veths).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const run = (cmd, args, opts = {}) => spawnSync(cmd, args, { stdio: 'inherit', cwd: root, ...opts }).status ?? 1;

if (process.getuid?.() !== 0) {
  console.error('the test suite starts real containers and must run as root');
  process.exit(1);
}

// The suite's own system packages (a registry, busybox, openssl) beside the service's: `npm test`
// must work on a machine where only `npm install && npm start` ran. Quick when all are there.
const pkgs = run('bash', [join(root, 'scripts/install-system-packages.sh')]);
if (pkgs !== 0) process.exit(pkgs);
const testPkgs = run('bash', [join(root, 'scripts/install-system-packages.sh'), join(root, 'scripts/test-packages.txt')]);
if (testPkgs !== 0) process.exit(testPkgs);

// What a run killed half-way left (containers, mounts, claims) would fail this run's leak check.
const stale = run(process.execPath, [join(root, 'scripts/leak-check.mjs'), '--clean']);
if (stale !== 0) process.exit(stale);

// Base images are built once (minutes) and cached in the shared test data dir, keyed by recipe.
const warm = run(process.execPath, [join(root, 'packages/server/dist/testing/warm.js')]);
if (warm !== 0) process.exit(warm);

const only = process.argv.slice(2);
const dirs = only.length
  ? only
  : ['packages/protocol/dist', 'packages/server/dist', 'packages/agent/dist', 'packages/sdk/dist', 'packages/mcp/dist', 'packages/cli/dist', 'e2e/dist'].filter((d) =>
      existsSync(join(root, d)),
    );
// TAP as it goes, and at the end what failed: a log cut to its last lines still says which.
const reportDir = mkdtempSync(join(tmpdir(), 'sandboxd-test-report-'));
const report = join(reportDir, 'failures.txt');
const status = run(
  process.execPath,
  [
    '--test',
    '--test-concurrency=1',
    '--test-timeout=600000',
    '--test-reporter=tap',
    '--test-reporter-destination=stdout',
    `--test-reporter=${join(root, 'scripts/failures-reporter.mjs')}`,
    `--test-reporter-destination=${report}`,
    ...dirs,
  ],
  { env: { ...process.env, NO_PROXY: '127.0.0.1,localhost', no_proxy: '127.0.0.1,localhost' } },
);
const leaks = run(process.execPath, [join(root, 'scripts/leak-check.mjs')]);
// What the tests built stays out of the cache (warm.js prunes it before a run, too).
run(process.execPath, [join(root, 'packages/server/dist/testing/warm.js'), '--prune-only']);
const lines = (existsSync(report) ? readFileSync(report, 'utf8') : '').trimEnd().split('\n');
rmSync(reportDir, { recursive: true, force: true });
const counts = /^(\d+) passed, (\d+) failed$/.exec(lines.at(-1) ?? '');
if (counts) {
  lines.pop();
  if (lines.length) console.log(lines.join('\n'));
  // A leak fails the run as a test would.
  console.log(`${counts[1]} passed, ${Number(counts[2]) + (leaks ? 1 : 0)} failed`);
} else console.log(`the test runner's report is missing; it exited with ${status}`);
process.exit(status || leaks);
