// After the suite: no container, overlay/loop mount, loop device, netns, veth or id range claim of ours may remain.
// A service started by `npm start` on the default names (cgroup parent `sandboxd`, netns prefix
// `sandboxd_`, bridge `sbbr0`, data dir outside the test data dir) may run beside the suite: what is
// its own is not ours, and is left out.
//
// `--clean` (run before the suite) removes what an earlier run left, one that was killed half-way
// (a machine's session ended, a CI job was cancelled): it names each thing it removes, then checks
// again, so this run's leak check judges this run only.
//
// What is on the host is enumerated by packages/server/dist/testing/host-objects.js (built by
// `npm run build`, which `npm test` runs first), the module the churn test and the soak benchmark
// count with; this script chooses what of it is the suite's, and removes it.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, rmdirSync } from 'node:fs';
import {
  childCgroups,
  crunContainers,
  ID_RANGE_REGISTRY,
  idRangeClaims,
  loopDevices,
  mounts,
  networkNamespaces,
  veths,
} from '../packages/server/dist/testing/host-objects.js';

const testDir = process.env.SANDBOXD_TEST_DATA_DIR ?? '/var/lib/sandboxd-test';
const clean = process.argv.includes('--clean');
const sh = (cmd, args) => {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
  } catch {
    return '';
  }
};

const SERVICE = { cgroupParent: 'sandboxd', netnsPrefix: 'sandboxd_', bridge: 'sbbr0' };

/**
 * Test daemons alive right now (another run, a benchmark): `--clean` leaves their objects alone.
 * Each is known by its environment (the harness sets SANDBOXD_DATA_DIR, _CGROUP_PARENT, _BRIDGE).
 */
function liveDaemons() {
  const out = [];
  for (const pid of readdirSync('/proc').filter((n) => /^\d+$/.test(n) && Number(n) !== process.pid)) {
    let env;
    try {
      env = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0');
    } catch {
      continue;
    }
    const get = (k) => env.find((e) => e.startsWith(`${k}=`))?.slice(k.length + 1);
    const dataDir = get('SANDBOXD_DATA_DIR');
    if (!dataDir || !underTest(dataDir) || out.some((d) => d.dataDir === dataDir)) continue;
    if (!readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes('serve')) continue;
    const cgroupParent = get('SANDBOXD_CGROUP_PARENT') ?? SERVICE.cgroupParent;
    out.push({ pid, dataDir, cgroupParent, netnsPrefix: `${cgroupParent.replace(/[^A-Za-z0-9-]/g, '_')}_`, bridge: get('SANDBOXD_BRIDGE') ?? SERVICE.bridge });
  }
  return out;
}

const underTest = (path) => path === testDir || path.startsWith(`${testDir}/`);

/** Every leftover, by kind: what it is (as printed) and how to remove it. Order matters for removal. */
function findLeftovers(spare = []) {
  const found = [];
  const spared = (what) => spare.some((d) => what.includes(`${d.dataDir}/`) || what === d.dataDir);
  const add = (kind, what, remove) => {
    if (!spared(what)) found.push({ kind, what, remove });
  };
  // Containers first: their processes hold mounts, netns and cgroups.
  for (const base of [`${testDir}/servers`, testDir]) {
    if (!existsSync(base)) continue;
    for (const s of readdirSync(base)) {
      for (const sub of ['crun', 'crun-steps']) {
        const crunRoot = `${base}/${s}/${sub}`;
        if (!existsSync(crunRoot)) continue;
        for (const id of crunContainers(crunRoot)) {
          if (!spared(`${crunRoot}/`)) add(`containers left under ${crunRoot}`, id, () => sh('crun', ['--root', crunRoot, 'delete', '-f', id]));
        }
      }
    }
  }
  const ours = mounts().filter((m) => underTest(m.source) || underTest(m.target));
  // Deepest first, so a mount on top of another goes before it.
  for (const m of ours.sort((a, b) => b.target.length - a.target.length)) {
    add('mounts left', m.line, () => sh('umount', [m.target]) || sh('umount', ['-l', m.target]));
  }
  for (const l of loopDevices().filter((l) => l.line.includes(`${testDir}/`))) {
    add('loop devices left', l.line, () => sh('losetup', ['-d', l.device]));
  }
  for (const n of networkNamespaces()) {
    if (!n.startsWith(SERVICE.netnsPrefix) && !spare.some((d) => n.startsWith(d.netnsPrefix))) add('network namespaces left', n, () => sh('ip', ['netns', 'delete', n]));
  }
  // A daemon's own veths: its sandboxes' (on its bridge) and its egress proxy's (peer in its netns).
  const ownedBy = (v, d) => v.master === d.bridge || !!v.peerNetns?.startsWith(d.netnsPrefix);
  for (const v of veths()) {
    if (!ownedBy(v, SERVICE) && !spare.some((d) => ownedBy(v, d))) add('veths left', v.line, () => sh('ip', ['link', 'delete', v.name]));
  }
  for (const ctl of ['memory', 'pids', 'cpu', 'freezer']) {
    const root = `/sys/fs/cgroup/${ctl}`;
    if (!existsSync(root)) continue;
    for (const parent of readdirSync(root).filter((n) => n.startsWith('sandboxd') && n !== SERVICE.cgroupParent && !spare.some((d) => d.cgroupParent === n))) {
      const dir = `${root}/${parent}`;
      for (const name of childCgroups(dir)) {
        add(`cgroups left in ${dir}`, name, () => {
          try {
            rmdirSync(`${dir}/${name}`);
          } catch {
            /* still has tasks: reported again below */
          }
        });
      }
    }
  }
  // Host-wide id range claims (runtime/id-ranges.ts) of the suite's data dirs.
  for (const c of idRangeClaims().filter((c) => underTest(c.dataDir) && !spared(`${c.dataDir}/`))) {
    add(`id range claims left in ${ID_RANGE_REGISTRY}`, c.key, () => rmSync(`${ID_RANGE_REGISTRY}/${c.key}`, { force: true }));
  }
  return found;
}

function report(found) {
  const byKind = new Map();
  for (const f of found) byKind.set(f.kind, [...(byKind.get(f.kind) ?? []), f.what]);
  return [...byKind].map(([kind, list]) => `${kind}:\n  ${list.join('\n  ')}`);
}

// A test daemon still running is not this suite's (the suite's daemons are stopped by the time
// this runs): another run's, or a benchmark's.
const live = liveDaemons();
for (const d of live) console.log(`leaving alone what test daemon ${d.pid} (${d.dataDir}) holds: it is running`);
let found = findLeftovers(live);
if (clean) {
  if (found.length) {
    console.log(`removing what an earlier test run left:\n- ${report(found).join('\n- ')}`);
    for (const f of found) f.remove();
  }
  // The stopped daemons' data dirs (disk images, databases), never through a mount still there.
  if (existsSync(`${testDir}/servers`)) {
    for (const s of readdirSync(`${testDir}/servers`)) {
      const dir = `${testDir}/servers/${s}`;
      if (live.some((d) => d.dataDir === dir) || mounts().some((m) => m.target.startsWith(`${dir}/`))) continue;
      sh('rm', ['-rf', '--one-file-system', dir]);
    }
  }
  found = findLeftovers(live);
}
if (found.length) {
  console.error(`leak check FAILED${clean ? ' (left by an earlier run, and could not be removed)' : ''}:\n- ${report(found).join('\n- ')}`);
  process.exit(1);
}
console.log('leak check: no containers, mounts, loop devices, netns, veths or cgroups left');
