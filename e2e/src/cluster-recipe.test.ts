// docs/cluster.md "A cluster on one machine", run as an operator runs it: every block marked
// `<!-- recipe: one-machine -->`, in order, in one `bash -euo pipefail` (one root shell, as the doc
// says), exactly as written, but for the first block, the settings, which this test writes itself
// (the doc's block must set the same variables): ports the harness finds free (a service from
// `npm start` may hold 8080, other tests theirs), a directory under the tests' data directory, the
// bridges, subnets and cgroup parents of four claimed test slots (two nodes, two control replicas),
// and the tests' shared layers directory as control's (the built-in `base` is cached there). The
// recipe itself starts the processes (in the background, their pids in files), checks the cluster
// with `sandboxd nodes list` and curl, stops everything and removes it from the machine; the test
// then checks that nothing of it is left (processes, bridges, nftables tables, cgroups, network
// namespaces, its directory, the database and its role). Whatever a failed step left is removed
// here: the processes by the pids the recipe recorded, the runtimes' leftovers with the runtime's
// own code (node-leftovers.ts), the PostgreSQL cluster.
//
// PostgreSQL: the recipe's commands for Debian's PostgreSQL (apt-get, pg_ctlcluster, psql and
// createdb as the postgres user, pg_conftool) run as written, but against a Debian cluster of this
// test's own (`pg_createcluster <version> sbd_recipe_<pid>` on a free port, the same tool the
// package uses to make 15/main, dropped afterwards), named in the settings' PG_CLUSTER. Not the
// system's 15/main: it may hold someone's data, be running or not, and must not be left with the
// recipe's role, database or state; nor startPostgres' server, which is not a Debian cluster that
// pg_ctlcluster and `--cluster` know.
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { postgresBinDir } from '../../packages/server/dist/testing/postgres.js';
import { claimSlot, freePort, REPO_ROOT, TEST_DATA_DIR } from './harness.js';
import { destroyNodeRuntime } from './node-leftovers.js';

const DOC = 'docs/cluster.md';
const MARKER = '<!-- recipe: one-machine -->';
const CLI = join(REPO_ROOT, 'packages/server/dist/cli.js');
/** The whole recipe may take this long (control's first start is quick here: `base` is cached). */
const RECIPE_TIMEOUT_MS = 6 * 60_000;

interface RecipeBlock {
  /** Its first line in the file (1-based). */
  line: number;
  code: string;
}

/** The ```sh blocks that follow `marker`, in order. A marker without one is an error. */
function recipeBlocks(markdown: string, marker: string): RecipeBlock[] {
  const lines = markdown.split('\n');
  const out: RecipeBlock[] = [];
  for (let i = 0; i < lines.length; i++) {
    if (lines[i]!.trim() !== marker) continue;
    if (!/^```(sh|bash)\s*$/.test(lines[i + 1] ?? '')) throw new Error(`${DOC}:${i + 1}: ${marker} must be followed by a \`\`\`sh block`);
    const end = lines.indexOf('```', i + 2);
    if (end === -1) throw new Error(`${DOC}:${i + 2}: unterminated code block`);
    out.push({ line: i + 3, code: lines.slice(i + 2, end).join('\n') + '\n' });
    i = end;
  }
  return out;
}

/** The variables a settings block assigns (NAME=value, several to a line; comments aside). */
function assignedNames(code: string): string[] {
  const names: string[] = [];
  for (const raw of code.split('\n')) {
    const line = raw.replace(/(^|\s)#.*$/, '').trim();
    if (!line) continue;
    const words = [...line.matchAll(/(?:^|\s)([A-Z][A-Z0-9_]*)=/g)].map((m) => m[1]!);
    assert.ok(words.length > 0, `settings: not an assignment: ${raw}`);
    names.push(...words);
  }
  return names;
}

interface Runtime {
  name: string;
  bridge: string;
  subnet: string;
  cgroup: string;
}

/** The directories of cgroup `name` under /sys/fs/cgroup (each v1 hierarchy, or the v2 one). */
function cgroupDirs(name: string): string[] {
  const root = '/sys/fs/cgroup';
  return [join(root, name), ...readdirSync(root).map((h) => join(root, h, name))].filter((d) => existsSync(d));
}

/** What of a runtime's host setup is still on the machine. */
function hostLeftovers(r: Runtime): string[] {
  const out: string[] = [];
  if (existsSync(`/sys/class/net/${r.bridge}`)) out.push(`bridge ${r.bridge}`);
  if (spawnSync('nft', ['list', 'table', 'inet', `sandboxd_${r.bridge}`], { stdio: 'ignore' }).status === 0) out.push(`nftables table inet sandboxd_${r.bridge}`);
  for (const d of cgroupDirs(r.cgroup)) out.push(`cgroup ${d}`);
  for (const n of existsSync('/run/netns') ? readdirSync('/run/netns') : []) if (n.startsWith(`${r.cgroup}_`)) out.push(`network namespace ${n}`);
  return out;
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
/** A pid the recipe recorded, still one of its processes (not a pid reused since). */
const ours = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').includes(CLI);
  } catch {
    return false;
  }
};

function run(argv: string[], opts: { input?: string } = {}): { status: number | null; out: string } {
  const r = spawnSync(argv[0]!, argv.slice(1), { encoding: 'utf8', input: opts.input, stdio: ['pipe', 'pipe', 'pipe'] });
  return { status: r.status, out: `${r.stdout ?? ''}${r.stderr ?? ''}` };
}

describe(`${DOC}: a cluster on one machine, as its recipe says`, { timeout: RECIPE_TIMEOUT_MS + 4 * 60_000 }, () => {
  const blocks = recipeBlocks(readFileSync(join(REPO_ROOT, DOC), 'utf8'), MARKER);
  const dir = join(TEST_DATA_DIR, `recipe-${randomBytes(3).toString('hex')}`);
  const work = mkdtempSync(join(tmpdir(), 'sbd-recipe-'));
  const pgVersion = basename(dirname(postgresBinDir()));
  const pgCluster = `sbd_recipe_${process.pid}`;
  const slots: Array<{ slot: number; release: () => void }> = [];
  const runtimes: Runtime[] = [];
  /** Every process the recipe started, by name, as its pid files said while it ran. */
  const pids = new Map<string, number>();
  let settings = '';
  let gatewayPort = 0;

  const readPids = () => {
    const logDir = join(dir, 'log');
    let names: string[];
    try {
      names = readdirSync(logDir).filter((f) => f.endsWith('.pid'));
    } catch {
      return; // not made yet, or removed by the recipe's clean-up
    }
    for (const f of names) {
      let text: string;
      try {
        text = readFileSync(join(logDir, f), 'utf8');
      } catch {
        continue; // the recipe removed it since the listing (a process it stopped)
      }
      const pid = Number(text.trim());
      if (pid > 0) pids.set(f.slice(0, -'.pid'.length), pid);
    }
  };

  before(() => {
    // A cluster an earlier run of this test left (its process killed before its clean-up).
    for (const line of run(['pg_lsclusters', '-h']).out.split('\n')) {
      const [version, name] = line.trim().split(/\s+/);
      const owner = /^sbd_recipe_(\d+)$/.exec(name ?? '')?.[1];
      if (owner && !alive(Number(owner))) run(['pg_dropcluster', '--stop', version!, name!]);
    }
    for (const name of ['node-1', 'node-2', 'control-a', 'control-b']) {
      const s = claimSlot();
      slots.push(s);
      runtimes.push({ name, bridge: `sbtest${s.slot}`, subnet: `10.${100 + (s.slot % 100)}.0.0/16`, cgroup: `sandboxd-test${s.slot}` });
    }
  });

  after(async () => {
    const problems: string[] = [];
    try {
      readPids();
      // Control and the edge before the nodes, as the recipe stops them.
      const order = [...pids].sort(([a], [b]) => Number(a.startsWith('node')) - Number(b.startsWith('node')));
      for (const [name, pid] of order) {
        if (!alive(pid) || !ours(pid)) continue;
        problems.push(`${name} (pid ${pid}) was still running`);
        process.kill(pid, 'SIGTERM');
        for (const deadline = Date.now() + 60_000; alive(pid) && Date.now() < deadline; ) await new Promise((r) => setTimeout(r, 200));
        if (alive(pid)) process.kill(pid, 'SIGKILL');
      }
      for (const r of runtimes) {
        const dataDir = join(dir, r.name);
        if (!existsSync(dataDir) && hostLeftovers(r).length === 0) continue;
        await destroyNodeRuntime({ dataDir, cgroupParent: r.cgroup, bridge: r.bridge, subnet: r.subnet }, REPO_ROOT).catch((err: unknown) => problems.push(`${r.name}'s runtime: ${String(err)}`));
        const left = hostLeftovers(r);
        if (left.length) problems.push(`${r.name} left ${left.join(', ')}`);
      }
      const dropped = run(['pg_dropcluster', '--stop', pgVersion, pgCluster]);
      if (dropped.status !== 0 && !/does not exist/.test(dropped.out)) problems.push(`pg_dropcluster: ${dropped.out.trim()}`);
      if (existsSync(dir)) run(['rm', '-rf', '--one-file-system', dir]);
    } finally {
      for (const s of slots) s.release();
      rmSync(work, { recursive: true, force: true });
    }
    if (problems.length) process.stderr.write(`cluster-recipe clean-up: ${problems.join('; ')}\n`);
  });

  test('the recipe has its settings first, then the steps', async () => {
    assert.ok(blocks.length >= 6, `${blocks.length} blocks marked ${MARKER}`);
    const docNames = assignedNames(blocks[0]!.code);
    const ports = new Set<number>();
    while (ports.size < 7) ports.add(await freePort());
    const [controlA, controlB, gateway, edge, node1, node2, pgPort] = [...ports];
    gatewayPort = gateway!;
    const r = Object.fromEntries(runtimes.map((x) => [x.name, x]));
    const values: Record<string, string> = {
      DIR: dir,
      LAYERS: join(TEST_DATA_DIR, 'layers'),
      PG_VERSION: pgVersion,
      PG_CLUSTER: pgCluster,
      DB_PASSWORD: randomBytes(16).toString('hex'),
      ADMIN_KEY: `sbd_test_${randomBytes(16).toString('hex')}`,
      TEMPLATES: 'base',
      CONTROL_A_PORT: String(controlA),
      CONTROL_B_PORT: String(controlB),
      GATEWAY_PORT: String(gateway),
      DOMAIN: 'sandboxes.localhost',
      EDGE_PORT: String(edge),
      NODE_1_PORT: String(node1),
      NODE_2_PORT: String(node2),
    };
    for (const [prefix, name] of [['NODE_1', 'node-1'], ['NODE_2', 'node-2'], ['CONTROL_A', 'control-a'], ['CONTROL_B', 'control-b']] as const) {
      values[`${prefix}_BRIDGE`] = r[name]!.bridge;
      values[`${prefix}_SUBNET`] = r[name]!.subnet;
      values[`${prefix}_CGROUP`] = r[name]!.cgroup;
    }
    assert.deepEqual([...docNames].sort(), Object.keys(values).sort(), "the doc's settings are the ones this test sets (a new one needs a value here)");
    settings = Object.entries(values).map(([k, v]) => `${k}=${v}`).join('\n') + '\n';
    // The test's own Debian PostgreSQL cluster, down, as the package leaves 15/main where no systemd runs.
    const made = run(['pg_createcluster', pgVersion, pgCluster, '--port', String(pgPort), '--start-conf', 'manual', '--locale', 'C.UTF-8']);
    assert.equal(made.status, 0, `pg_createcluster: ${made.out}`);
  });

  test('every block runs, in order, under bash -euo pipefail; the cluster answers; nothing of it is left', async () => {
    assert.ok(settings, 'the settings were written');
    const script = [settings, ...blocks.slice(1).map((b) => `printf '\\n::: %s\\n' '${DOC}:${b.line}'\n${b.code}`)].join('\n');
    const file = join(work, 'recipe.sh');
    writeFileSync(file, script);
    const env: Record<string, string> = {};
    for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('SANDBOXD_') && !/^PG[A-Z]+$/.test(k)) env[k] = v;
    env.PATH = `/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`;
    env.DEBIAN_FRONTEND = 'noninteractive';
    env.NO_PROXY = env.no_proxy = '127.0.0.1,localhost,.localhost';
    const t0 = Date.now();
    const watch = setInterval(readPids, 200);
    const result = await new Promise<{ code: number | null; out: string }>((resolve, reject) => {
      const child = spawn('bash', ['-euo', 'pipefail', file], { cwd: REPO_ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      child.stdout.on('data', (d) => (out += d));
      child.stderr.on('data', (d) => (out += d));
      const timer = setTimeout(() => {
        out += `\n(the recipe ran past ${RECIPE_TIMEOUT_MS / 1000} s: killed)\n`;
        child.kill('SIGKILL');
      }, RECIPE_TIMEOUT_MS);
      child.on('error', reject);
      child.on('close', (code) => {
        clearTimeout(timer);
        resolve({ code, out });
      });
    }).finally(() => clearInterval(watch));
    readPids();
    const seconds = ((Date.now() - t0) / 1000).toFixed(1);
    const logs = () =>
      [...pids.keys()]
        .map((n) => join(dir, 'log', `${n}.log`))
        .filter((f) => existsSync(f))
        .map((f) => `--- ${basename(f)} (last lines)\n${readFileSync(f, 'utf8').split('\n').slice(-25).join('\n')}`)
        .join('\n');
    const failedAt = [...result.out.matchAll(/^::: (\S+)$/gm)].pop()?.[1] ?? 'the settings';
    assert.equal(result.code, 0, `the recipe failed in the block at ${failedAt}, after ${seconds} s:\n${result.out.split('\n').slice(-60).join('\n')}\n${logs()}`);
    process.stderr.write(`the one-machine recipe ran in ${seconds} s\n`);
    // SANDBOXD_TEST_SHOW_RECIPE=1: the transcript, as an operator would see it.
    if (process.env.SANDBOXD_TEST_SHOW_RECIPE) process.stderr.write(result.out);

    // What the checks printed: both nodes up, the sandbox's public_host, the command through both gateways.
    assert.deepEqual([...pids.keys()].sort(), ['control-a', 'control-b', 'edge', 'node-1', 'node-2']);
    const listed = result.out.split('\n').filter((l) => /^node-[12]\s/.test(l));
    assert.equal(listed.length, 2, `sandboxd nodes list shows both nodes:\n${result.out}`);
    assert.match(result.out, new RegExp(`^http://[a-z0-9]+\\.sandboxes\\.localhost:${gatewayPort}$`, 'm'), 'the public_host, in host mode');
    assert.equal([...result.out.matchAll(/"stdout":"hello from [^"\\]+\\n"/g)].length, 2, `the command ran through the edge and through replica B:\n${result.out}`);

    // The recipe's stop and removal left nothing behind.
    for (const [name, pid] of pids) assert.ok(!(alive(pid) && ours(pid)), `${name} (pid ${pid}) still runs`);
    for (const r of runtimes) assert.deepEqual(hostLeftovers(r), [], `${r.name}'s host setup`);
    assert.ok(!existsSync(dir), `${dir} is gone`);
    const q = run(['runuser', '-u', 'postgres', '--', 'psql', '--cluster', `${pgVersion}/${pgCluster}`, '-Atc', "SELECT count(*) FROM pg_roles WHERE rolname = 'sandboxd'"]);
    assert.equal(q.out.trim(), '0', 'the role is dropped (and the database with it before)');
  });
});
