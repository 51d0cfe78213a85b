// After the suite: no container, overlay/loop mount, loop device, netns, veth or id range claim of ours may remain.
// A service started by `npm start` on the default names (cgroup parent `sandboxd`, netns prefix
// `sandboxd_`, bridge `sbbr0`, data dir outside the test data dir) may run beside the suite: what is
// its own is not ours, and is left out.
import { execFileSync } from 'node:child_process';
import { readFileSync, existsSync, readdirSync } from 'node:fs';

const testDir = process.env.SANDBOXD_TEST_DATA_DIR ?? '/var/lib/sandboxd-test';
const problems = [];
const sh = (cmd, args) => {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return '';
  }
};

const SERVICE = { cgroupParent: 'sandboxd', netnsPrefix: 'sandboxd_', bridge: 'sbbr0' };
const underTest = (path) => path === testDir || path.startsWith(`${testDir}/`);
const mounts = readFileSync('/proc/self/mounts', 'utf8')
  .split('\n')
  .filter((l) => l && l.split(' ').slice(0, 2).some((f) => underTest(f.replace(/\\040/g, ' '))));
if (mounts.length) problems.push(`mounts left: \n  ${mounts.join('\n  ')}`);
const loops = sh('losetup', ['-a']).split('\n').filter((l) => l.includes(`${testDir}/`));
if (loops.length) problems.push(`loop devices left:\n  ${loops.join('\n  ')}`);
const netns = sh('ip', ['netns', 'list'])
  .split('\n')
  .filter(Boolean)
  .filter((l) => !l.startsWith(SERVICE.netnsPrefix));
if (netns.length) problems.push(`network namespaces left: ${netns.join(', ')}`);
const veths = sh('ip', ['-o', 'link', 'show', 'type', 'veth'])
  .split('\n')
  .filter(Boolean)
  .filter((l) => !l.includes(` master ${SERVICE.bridge} `));
if (veths.length) problems.push(`veths left:\n  ${veths.join('\n  ')}`);
for (const ctl of ['memory', 'pids', 'cpu', 'freezer']) {
  const root = `/sys/fs/cgroup/${ctl}`;
  if (!existsSync(root)) continue;
  for (const parent of readdirSync(root).filter((n) => n.startsWith('sandboxd') && n !== SERVICE.cgroupParent)) {
    const dir = `${root}/${parent}`;
    const left = readdirSync(dir, { withFileTypes: true }).filter((e) => e.isDirectory()).map((e) => e.name);
    if (left.length) problems.push(`cgroups left in ${dir}: ${left.join(', ')}`);
  }
}
// Host-wide id range claims (runtime/id-ranges.ts) of the suite's data dirs.
const registry = '/run/sandboxd/id-ranges';
if (existsSync(registry)) {
  const ours = readdirSync(registry).filter((k) => {
    try {
      return JSON.parse(readFileSync(`${registry}/${k}`, 'utf8')).dataDir?.startsWith(testDir);
    } catch {
      return false;
    }
  });
  if (ours.length) problems.push(`id range claims left in ${registry}: ${ours.join(', ')}`);
}
const servers = `${testDir}/servers`;
if (existsSync(servers)) {
  for (const s of readdirSync(servers)) {
    const crunRoot = `${servers}/${s}/crun`;
    if (existsSync(crunRoot)) {
      const list = sh('crun', ['--root', crunRoot, 'list', '-q']).split('\n').filter(Boolean);
      if (list.length) problems.push(`containers left under ${crunRoot}: ${list.join(', ')}`);
    }
  }
}
if (problems.length) {
  console.error(`leak check FAILED:\n- ${problems.join('\n- ')}`);
  process.exit(1);
}
console.log('leak check: no containers, mounts, loop devices, netns, veths or cgroups left');
