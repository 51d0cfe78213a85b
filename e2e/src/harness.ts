import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync, createWriteStream, readFileSync, writeFileSync } from 'node:fs';
import { lookup } from 'node:dns/promises';
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:net';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

/** A real sandboxd daemon started for a test, on its own data dir, port and gateway port range. */
export interface TestServer {
  baseUrl: string;
  apiKey: string;
  dataDir: string;
  port: number;
  env: Record<string, string>;
  /** Output of the daemon (stdout+stderr), for failure messages. */
  logFile: string;
  /** Pid of the running daemon (undefined while it is down). */
  readonly pid: number | undefined;
  /** SIGTERM and wait (sandboxes keep running). */
  shutdown(): Promise<void>;
  /** SIGKILL and wait (simulates a crash). */
  kill9(): Promise<void>;
  /** Starts the daemon again on the same data dir and settings. */
  restart(): Promise<void>;
  /** Deletes every sandbox through the API, stops the daemon and removes its data dir. */
  stop(): Promise<void>;
}

const here = dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = resolve(here, '../..');
export const TEST_DATA_DIR = process.env.SANDBOXD_TEST_DATA_DIR ?? '/var/lib/sandboxd-test';

// Real clients honour HTTP(S)_PROXY; our servers are on loopback.
process.env.NO_PROXY = '127.0.0.1,localhost';
process.env.no_proxy = '127.0.0.1,localhost';

/** The http(s) URIs of the host's apt sources (one-line and deb822 files). */
export function aptSourceUrls(): string[] {
  const dir = '/etc/apt/sources.list.d';
  const files = ['/etc/apt/sources.list', ...(existsSync(dir) ? readdirSync(dir).map((f) => join(dir, f)) : [])];
  const urls = new Set<string>();
  for (const f of files.filter((f) => /\.(list|sources)$/.test(f) && existsSync(f))) {
    for (const m of readFileSync(f, 'utf8').matchAll(/^[^#\n]*?\b(https?:\/\/[^\s\]]+)/gm)) urls.add(m[1]!);
  }
  return [...urls];
}

/** The addresses of the host's apt sources, as /32 CIDRs. */
export async function aptSourceCidrs(): Promise<string[]> {
  const out = new Set<string>();
  for (const h of new Set(aptSourceUrls().map((u) => new URL(u).hostname))) {
    for (const a of await lookup(h, { all: true, family: 4 }).catch(() => [])) out.add(`${a.address}/32`);
  }
  return [...out];
}

export async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolvePort(port));
    });
  });
}

const SLOT_DIR = '/run/sandboxd-test-slots';

/**
 * A slot number unique among live test daemons on this host, across processes: it picks the
 * cgroup parent, bridge, subnet and gateway ports, which are host-global. A slot whose owner
 * process died is taken over.
 */
export function claimSlot(): { slot: number; release: () => void } {
  mkdirSync(SLOT_DIR, { recursive: true });
  for (let slot = 0; slot < 60; slot++) {
    const file = join(SLOT_DIR, String(slot));
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        writeFileSync(file, String(process.pid), { flag: 'wx' });
        return { slot, release: () => rmSync(file, { force: true }) };
      } catch {
        const owner = Number(readFileSync(file, 'utf8').trim() || '0');
        let alive = false;
        try {
          if (owner > 0) process.kill(owner, 0);
          alive = owner > 0;
        } catch {
          alive = false;
        }
        if (alive) break;
        rmSync(file, { force: true });
      }
    }
  }
  throw new Error('no free test slot');
}

export interface StartOptions {
  env?: Record<string, string>;
  /** The daemon's role: `serve` (default) or `control` (a cluster's API over its nodes). */
  command?: 'serve' | 'control' | 'edge';
  /** Built-in templates to serve (default base,code-interpreter; they are cached in the shared layer dir). */
  templates?: string[];
  readyTimeoutMs?: number;
  /** Its API's port (default: a free one). */
  port?: number;
}

export async function startServer(opts: StartOptions = {}): Promise<TestServer> {
  const id = randomBytes(4).toString('hex');
  const dataDir = join(TEST_DATA_DIR, 'servers', id);
  mkdirSync(dataDir, { recursive: true });
  const port = opts.port ?? (await freePort());
  // Each server of this process gets its own block of gateway ports; the pid spreads processes apart.
  const { slot, release } = claimSlot();
  const blockBase = 41000 + slot * 300;
  const apiKey = `sbd_test_${randomBytes(16).toString('hex')}`;
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    SANDBOXD_HOST: '127.0.0.1',
    SANDBOXD_PORT: String(port),
    SANDBOXD_DATA_DIR: dataDir,
    SANDBOXD_LAYERS_DIR: join(TEST_DATA_DIR, 'layers'),
    SANDBOXD_BOOTSTRAP_API_KEY: apiKey,
    SANDBOXD_GATEWAY_PORTS: `${blockBase}-${blockBase + 299}`,
    SANDBOXD_TEMPLATES: (opts.templates ?? ['base', 'code-interpreter']).join(','),
    SANDBOXD_SWEEP_INTERVAL_MS: '200',
    // Test daemons hold no reserve at rest (the warm-pool test and the burst benchmark set one):
    // many of them run at once, and each would keep dozens of sandboxes booted.
    SANDBOXD_WARM_POOL_RESERVE: '0',
    // Test daemons share the host's filesystem, and each would count only its own sandboxes' disks
    // against its free space: the admission is meaningless among them, and dense tests (30
    // concurrent creates, 1,000 alive) would be refused for the others' promises. The tests of the
    // admission turn it on, on a filesystem of their own (disk-admission.test.ts).
    SANDBOXD_DISK_ADMISSION: 'off',
    // Cgroups, netns names, the bridge and its subnet are host-global: each live daemon needs its own.
    SANDBOXD_CGROUP_PARENT: `sandboxd-test${slot}`,
    SANDBOXD_BRIDGE: `sbtest${slot}`,
    SANDBOXD_SUBNET: `10.${100 + (slot % 100)}.0.0/16`,
    // The daemon's defaults let sandboxes reach the host's apt sources (their ports only) even in a
    // blocked range, as on this kind of VM, whose "internet" is documentation addresses.
    ...opts.env,
  };
  const logFile = join(dataDir, 'daemon.log');
  const baseUrl = `http://127.0.0.1:${port}`;
  let child: ChildProcess | undefined;

  let exitedEarly = () => false;
  const launch = async () => {
    const out = createWriteStream(logFile, { flags: 'a', mode: 0o600 });
    // SANDBOXD_TEST_DAEMON_NODE_ARGS: node flags for the daemon (e.g. --cpu-prof when profiling a benchmark).
    const nodeArgs = (process.env.SANDBOXD_TEST_DAEMON_NODE_ARGS ?? '').split(' ').filter(Boolean);
    child = spawn(process.execPath, [...nodeArgs, join(REPO_ROOT, 'packages/server/dist/cli.js'), opts.command ?? 'serve'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.pipe(out);
    child.stderr!.pipe(out);
    const deadline = Date.now() + (opts.readyTimeoutMs ?? 15 * 60_000);
    let exited = false;
    child.once('exit', () => (exited = true));
    exitedEarly = () => exited;
    while (Date.now() < deadline) {
      if (exited) throw new Error(`sandboxd exited during start; see ${logFile}`);
      try {
        const res = await fetch(`${baseUrl}/health`);
        if (res.ok) {
          await builtinsReady(deadline);
          return;
        }
      } catch {
        /* not yet */
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    child.kill('SIGKILL');
    throw new Error(`sandboxd did not become ready; see ${logFile}`);
  };
  // The daemon serves while built-ins it lacks are built behind it (503 TEMPLATE_BUILDING until
  // each is ready). On the shared layers directory a test wants them ready, as after the suite's
  // warm step; a test with layers of its own (the builds' tests and benchmarks) watches them itself.
  const wanted = opts.command === 'edge' || env.SANDBOXD_LAYERS_DIR !== join(TEST_DATA_DIR, 'layers') ? [] : (opts.templates ?? ['base', 'code-interpreter']);
  const builtinsReady = async (deadline: number) => {
    while (wanted.length > 0 && Date.now() < deadline) {
      const res = await fetch(`${baseUrl}/v1/templates`, { headers: { 'x-api-key': env.SANDBOXD_BOOTSTRAP_API_KEY ?? apiKey } }).catch(() => undefined);
      const list = res?.ok ? (((await res.json()) as { data?: Array<{ name: string; status?: string }> }).data ?? []) : [];
      if (res?.ok && wanted.every((n) => list.some((t) => t.name === n && t.status !== 'building'))) return;
      if (exitedEarly()) return;
      await new Promise((r) => setTimeout(r, 500));
    }
  };

  const waitExit = (signal: NodeJS.Signals) => endProcess(child, signal, `sandboxd ${opts.command ?? 'serve'}`, logFile);

  try {
    await launch();
  } catch (err) {
    release();
    throw err;
  }
  const server: TestServer = {
    baseUrl,
    apiKey,
    dataDir,
    port,
    env,
    logFile,
    get pid() {
      return child && child.exitCode === null && child.signalCode === null ? child.pid : undefined;
    },
    shutdown: () => waitExit('SIGTERM'),
    kill9: () => waitExit('SIGKILL'),
    restart: launch,
    stop: async () => {
      try {
        if (child && child.exitCode === null && child.signalCode === null) {
          await deleteAllSandboxes(server).catch(() => {});
        }
      } finally {
        try {
          await waitExit('SIGTERM');
          await destroyLeftovers(env, logFile);
          rmSync(dataDir, { recursive: true, force: true });
        } finally {
          release();
        }
      }
    },
  };
  return server;
}

/**
 * Destroys, with the daemon's own runtime, what the stopped daemon still holds: sandboxes of other
 * organizations a test did not delete, a create still in flight when the daemon was stopped, a
 * daemon killed and not restarted. Names them on stderr (with the daemon's lines about them), so a
 * test that leaves sandboxes behind is seen without failing the run on another test's account.
 */
async function destroyLeftovers(env: Record<string, string>, logFile: string): Promise<void> {
  const { loadConfig } = await import('../../packages/server/dist/config/index.js');
  const { CrunRuntime } = await import('../../packages/server/dist/runtime/index.js');
  const config = loadConfig(env);
  const runtime = new CrunRuntime({
    dataDir: config.dataDir,
    agentBundlePath: config.agentBundlePath,
    cgroupParent: config.runtime.cgroupParent,
    bridgeName: config.runtime.bridge,
    subnetCidr: config.runtime.subnet,
    log: () => undefined,
  });
  const ids = await runtime.list();
  if (ids.length === 0) return;
  const log = existsSync(logFile) ? readFileSync(logFile, 'utf8').split('\n') : [];
  process.stderr.write(`test harness: the stopped daemon left ${ids.length} sandbox(es); destroying them: ${ids.join(', ')}\n`);
  for (const id of ids) {
    for (const line of log.filter((l) => l.includes(id)).slice(-5)) process.stderr.write(`  ${line}\n`);
    await runtime.destroy(id).catch((err: unknown) => process.stderr.write(`  destroying ${id} failed: ${String(err)}\n`));
  }
  await runtime.close().catch(() => undefined);
}

export interface ApiResponse<T = any> {
  status: number;
  body: T;
  headers: Headers;
}

/** How long a daemon may take to end on SIGTERM before the harness kills it (and fails). */
const STOP_GRACE_MS = 60_000;

/**
 * Sends `signal` and waits for the exit. A daemon that does not end within STOP_GRACE_MS of a
 * SIGTERM is killed, and the call fails with the end of its log: a shutdown that hangs is a defect
 * to see, not a test file that times out with its clean-up never run.
 */
export function endProcess(child: ChildProcess | undefined, signal: NodeJS.Signals, what: string, logFile: string): Promise<void> {
  return new Promise<void>((res, rej) => {
    if (!child || child.exitCode !== null || child.signalCode !== null) return res();
    let hung: Error | undefined;
    const timer =
      signal === 'SIGKILL'
        ? undefined
        : setTimeout(() => {
            const tail = existsSync(logFile) ? readFileSync(logFile, 'utf8').split('\n').slice(-30).join('\n') : '(no log)';
            hung = new Error(`${what} did not end within ${STOP_GRACE_MS / 1000} s of ${signal}; killed. Its log's last lines:\n${tail}`);
            child.kill('SIGKILL');
          }, STOP_GRACE_MS);
    child.once('exit', () => {
      clearTimeout(timer);
      if (hung) rej(hung);
      else res();
    });
    child.kill(signal);
  });
}

/**
 * Runs every step of a clean-up in order, each even when an earlier one failed, then fails with
 * all that did: one part that cannot stop must not leave the others (and their namespaces) behind.
 */
export async function stopAll(...steps: Array<() => unknown>): Promise<void> {
  const errors: unknown[] = [];
  for (const step of steps) {
    try {
      await step();
    } catch (err) {
      errors.push(err);
    }
  }
  if (errors.length === 1) throw errors[0];
  if (errors.length > 1) throw new AggregateError(errors, errors.map((e) => (e instanceof Error ? e.message : String(e))).join('\n'));
}

const API_TIMEOUT_MS = 180_000;

/** One call to the lifecycle API with the server's key (override with headers). */
export async function api<T = any>(
  server: Pick<TestServer, 'baseUrl' | 'apiKey'>,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<ApiResponse<T>> {
  const res = await fetch(`${server.baseUrl}${path}`, {
    method,
    headers: { 'x-api-key': server.apiKey, ...(body !== undefined ? { 'content-type': 'application/json' } : {}), ...headers },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    // No call of a test takes minutes: one that hangs fails here, with its path, not as a file timeout.
    signal: AbortSignal.timeout(API_TIMEOUT_MS),
  }).catch((err: unknown) => {
    throw new Error(`${method} ${path} on ${server.baseUrl}: ${(err as Error).name === 'TimeoutError' ? `no answer within ${API_TIMEOUT_MS / 1000} s` : String(err)}`, { cause: err });
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = text ? JSON.parse(text) : undefined;
  } catch {
    /* keep text */
  }
  return { status: res.status, body: parsed as T, headers: res.headers };
}

export interface CreatedSandbox {
  id: string;
  publicHost: string;
  authToken: string;
  body: any;
}

export async function createSandbox(server: Pick<TestServer, 'baseUrl' | 'apiKey'>, body: Record<string, unknown> = {}): Promise<CreatedSandbox> {
  const res = await api(server, 'POST', '/v1/sandboxes', { template_name: 'base', ...body });
  if (res.status !== 201) throw new Error(`create failed: ${res.status} ${JSON.stringify(res.body)}`);
  return { id: res.body.id, publicHost: res.body.public_host, authToken: res.body.auth_token, body: res.body };
}

/** One call to a sandbox's agent through the gateway with its token. */
export async function agent<T = any>(
  sb: Pick<CreatedSandbox, 'publicHost' | 'authToken'>,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
): Promise<ApiResponse<T>> {
  return api({ baseUrl: sb.publicHost, apiKey: '' }, method, path, body, { authorization: `Bearer ${sb.authToken}`, 'x-api-key': '', ...headers });
}

export async function deleteAllSandboxes(server: Pick<TestServer, 'baseUrl' | 'apiKey'>): Promise<void> {
  for (;;) {
    const list = await api(server, 'GET', '/v1/sandboxes?limit=1000');
    if (list.status !== 200 || list.body.data.length === 0) return;
    for (const s of list.body.data) await api(server, 'DELETE', `/v1/sandboxes/${s.id}`);
  }
}

/**
 * The containers crun lists under a daemon's data dir. crun reads every container's state, and one
 * that is being deleted at that moment makes it fail ("error opening file .../status"): asked again.
 */
export function crunContainers(dataDir: string): string[] {
  for (let attempt = 1; ; attempt++) {
    try {
      return execFileSync('crun', ['--root', join(dataDir, 'crun'), 'list', '-q'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] })
        .split('\n')
        .filter(Boolean);
    } catch (err) {
      if (attempt >= 10) throw err;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
    }
  }
}
