import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { lookup } from 'node:dns/promises';
import { request } from 'node:http';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { readHostAptConfig } from '../images/apt-sources.js';
import { CrunRuntime, type CrunRuntimeOptions } from '../runtime/index.js';
import type { SandboxSpec } from '../runtime/types.js';
import { testDataDir } from './fixtures.js';

/**
 * A stand-in for the real agent: listens on the socket the runtime passes as fd 3 and answers
 * every request with facts about itself. Runtime tests use it so that they test the runtime, not
 * the state of the agent's code (one test uses the real bundle).
 */
const TEST_AGENT = `
const http = require('node:http');
const os = require('node:os');
const fd = Number(process.env.SANDBOXD_AGENT_LISTEN_FD);
delete process.env.SANDBOXD_AGENT_LISTEN_FD;
http.createServer((req, res) => {
  res.setHeader('content-type', 'application/json');
  res.end(JSON.stringify({ ok: true, path: req.url, pid: process.pid, ppid: process.ppid, hostname: os.hostname(), uid: process.getuid(), env: process.env }));
}).listen({ fd });
`;

export interface TestRuntime {
  rt: CrunRuntime;
  dataDir: string;
  /** Destroys every sandbox, removes the host setup of this runtime and its data dir. */
  teardown: () => Promise<void>;
}

let counter = 0;

/**
 * A CrunRuntime of its own (data dir, bridge, /24 subnet, cgroup parent), so that concurrent test
 * files and a running service never share host state. Names derive from the pid.
 */
export async function createTestRuntime(opts: Partial<CrunRuntimeOptions> = {}): Promise<TestRuntime> {
  const n = counter++;
  const tag = `${process.pid % 100000}${n}`;
  const dataDir = join(testDataDir(), `rt-${tag}`);
  const agentDir = join(dataDir, 'test-agent');
  await mkdir(agentDir, { recursive: true, mode: 0o711 });
  await writeFile(join(agentDir, 'agent.cjs'), TEST_AGENT, { mode: 0o644 });
  const rt = new CrunRuntime({
    dataDir,
    agentBundlePath: join(agentDir, 'agent.cjs'),
    bridgeName: `sbrt${tag}`.slice(0, 15),
    subnetCidr: `10.96.${((process.pid + n * 37) % 250) + 1}.0/24`,
    cgroupParent: `sandboxd-test-${tag}`,
    egressAllow: await aptSourceCidrs(),
    log: process.env.SANDBOXD_TEST_VERBOSE ? (l) => process.stderr.write(`[rt] ${l}\n`) : undefined,
    ...opts,
  });
  await rt.setupHost();
  return {
    rt,
    dataDir,
    teardown: async () => {
      for (const id of await rt.list()) await rt.destroy(id);
      await rt.teardownHost();
      await rm(dataDir, { recursive: true, force: true });
    },
  };
}

export function testSpec(id: string, lowerDirs: string[], overrides: Partial<SandboxSpec> = {}): SandboxSpec {
  return {
    id,
    lowerDirs,
    resources: { vcpu: 1, memoryMb: 256, diskGb: 1, pidsMax: 256 },
    internetAccess: false,
    hostname: id,
    env: { SANDBOX_ID: id },
    ...overrides,
  };
}

/** GET over the agent's unix socket; the JSON body. */
export function agentGet(socketPath: string, path = '/health', timeoutMs = 5000): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    const req = request({ socketPath, path, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => {
        try {
          resolve(JSON.parse(body) as Record<string, unknown>);
        } catch (err) {
          reject(err as Error);
        }
      });
    });
    req.on('timeout', () => req.destroy(new Error(`agent at ${socketPath} did not answer in ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}

/** Runs bash in the sandbox; asserts exit 0 unless `allowFail`; stdout. */
export async function sh(rt: CrunRuntime, id: string, script: string, allowFail = false): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const r = await rt.exec(id, ['/bin/bash', '-c', script]);
  if (!allowFail) assert.equal(r.code, 0, `in ${id}: ${script}\nstdout: ${r.stdout}\nstderr: ${r.stderr}`);
  return r;
}

/** http://<mirror>/<path>/dists/<suite>/Release of the host's first Debian source (never hard-coded). */
export function aptReleaseUrl(): string {
  const dir = '/etc/apt/sources.list.d';
  for (const f of existsSync(dir) ? readdirSync(dir).filter((x) => x.endsWith('.sources')) : []) {
    const text = readFileSync(join(dir, f), 'utf8');
    for (const stanza of text.split(/\n\s*\n/)) {
      const uri = /^URIs:\s*(http:\/\/\S+)/m.exec(stanza)?.[1];
      const suite = /^Suites:\s*(\S+)/m.exec(stanza)?.[1];
      if (uri && suite) return `${uri.replace(/\/$/, '')}/dists/${suite}/Release`;
    }
  }
  throw new Error('no plain-HTTP deb822 source in /etc/apt/sources.list.d');
}

/**
 * The host's apt sources as egress exceptions (CIDRs): images point apt at them, and where they
 * sit in a blocked range (on a test VM whose "internet" is documentation addresses) an operator
 * allows them with SANDBOXD_EGRESS_ALLOW, as tests do here.
 */
export async function aptSourceCidrs(): Promise<string[]> {
  const hosts = new Set<string>();
  for (const src of (await readHostAptConfig()).sources) {
    for (const uri of src.uris) {
      if (/^https?:\/\//.test(uri)) hosts.add(new URL(uri).hostname);
    }
  }
  const out = new Set<string>();
  for (const host of hosts) for (const { address } of await lookup(host, { all: true, family: 4 })) out.add(`${address}/32`);
  return [...out].sort();
}

/**
 * A running sandbox's disk, shown to the host again for a test to look at its upper: the runtime
 * detaches it from the host once the container holds it. The disk's own loop device (recorded in
 * `disk.loop`) is mounted at its old place, `<dir>/disk`: a second mount of the same filesystem,
 * not a second filesystem on the same image. `close` unmounts it.
 */
export async function hostView(rt: CrunRuntime, id: string): Promise<{ upper: string; close: () => void }> {
  await rt.settled(id);
  const dir = join(rt.dataDir, 'sandboxes', id);
  const dev = readFileSync(join(dir, 'disk.loop'), 'utf8').trim();
  assert.match(dev, /^\/dev\/loop\d+$/);
  assert.equal(readFileSync(`/sys/block/${dev.slice(5)}/loop/backing_file`, 'utf8').trim(), join(dir, 'disk.img'), `${dev} serves ${id}'s disk`);
  execFileSync('mount', ['-t', 'ext4', '-o', 'noatime', dev, join(dir, 'disk')]);
  return { upper: join(dir, 'disk', 'upper'), close: () => execFileSync('umount', [join(dir, 'disk')]) };
}

export async function waitFor<T>(what: string, fn: () => Promise<T | undefined>, timeoutMs = 10000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

/**
 * Asserts that the runtime holds no trace of any sandbox or build step: no id in list(), no
 * directory, container, mount or loop device under its data dir (the disk pool aside: it is the
 * runtime's own stock), no netns of its prefix, no port on its bridge, no cgroup below its parent.
 */
export async function assertNoLeaks(rt: CrunRuntime): Promise<void> {
  assert.deepEqual(await rt.list(), [], 'runtime.list() is empty');
  const dataDir = rt.dataDir;
  for (const d of ['sandboxes', 'steps', 'crun', 'crun-steps']) {
    const dir = join(dataDir, d);
    const left = existsSync(dir) ? readdirSync(dir) : [];
    assert.deepEqual(left, [], `${dir} is empty`);
  }
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((m) => m.startsWith(dataDir + '/') && !m.startsWith(join(dataDir, 'disk-pool') + '/'));
  assert.deepEqual(mounts, [], 'no mounts under the data dir');
  const loops: string[] = [];
  for (const n of readdirSync('/sys/block').filter((x) => x.startsWith('loop'))) {
    try {
      const backing = readFileSync(`/sys/block/${n}/loop/backing_file`, 'utf8').trim();
      if (backing.startsWith(dataDir + '/') && !backing.startsWith(join(dataDir, 'disk-pool') + '/')) loops.push(`${n}: ${backing}`);
    } catch {
      /* unbound */
    }
  }
  assert.deepEqual(loops, [], 'no loop devices backed by sandbox disks');
  const netns = existsSync('/run/netns') ? readdirSync('/run/netns').filter((n) => n.startsWith(rt.netnsName(''))) : [];
  assert.deepEqual(netns, [], 'no network namespaces of ours');
  const brif = `/sys/class/net/${rt.bridge}/brif`;
  assert.deepEqual(existsSync(brif) ? readdirSync(brif) : [], [], 'no veth on our bridge');
  const cg: string[] = [];
  for (const h of readdirSync('/sys/fs/cgroup')) {
    const parent = `/sys/fs/cgroup/${h}/${rt.cgroupParent}`;
    if (!existsSync(parent)) continue;
    const walk = (d: string) => {
      for (const e of readdirSync(d, { withFileTypes: true })) {
        if (!e.isDirectory()) continue;
        // The steps' parent directory itself may stay; a step leaf may not.
        if (!(d === parent && e.name === '_steps')) cg.push(`${d}/${e.name}`);
        walk(`${d}/${e.name}`);
      }
    };
    walk(parent);
  }
  assert.deepEqual(cg, [], 'no cgroups below our parent');
}

/**
 * Hands inside the running sandboxes of a CrunRuntime, as the conformance suites want them: a
 * file written or read as a process inside would, and something killed for lack of memory.
 */
export function crunHands(rt: CrunRuntime): {
  writeFile(id: string, path: string, content: string): Promise<void>;
  readFile(id: string, path: string): Promise<string | undefined>;
  oomKill(id: string): Promise<void>;
} {
  const run = async (id: string, argv: string[], input?: string) => rt.exec(id, argv, input === undefined ? {} : { input });
  return {
    writeFile: async (id, path, content) => {
      const r = await run(id, ['/bin/sh', '-c', 'mkdir -p "$(dirname "$1")" && cat > "$1"', 'sh', path], content);
      if (r.code !== 0) throw new Error(`writing ${path} in ${id}: ${r.stderr}`);
    },
    readFile: async (id, path) => {
      const r = await run(id, ['/bin/cat', '--', path]);
      return r.code === 0 ? r.stdout : undefined;
    },
    oomKill: async (id) => {
      await rt.oomWatchReady();
      // dd touches a 400 MiB buffer: more than the sandbox's 128 MB, and it cannot swap.
      const r = await run(id, ['/bin/sh', '-c', 'dd if=/dev/zero of=/dev/null bs=400M count=1']);
      if (r.code === 0) throw new Error(`dd was not killed in ${id}`);
    },
  };
}
