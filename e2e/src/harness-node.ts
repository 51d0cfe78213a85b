// A real sandboxd node started for a cluster test: its own data dir, cgroup parent, bridge and
// subnet, optionally in a network namespace of its own; destroyed with everything it made.

import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { claimSlot, endProcess, freePort, REPO_ROOT, TEST_DATA_DIR } from './harness.js';
import { destroyNodeRuntime, type NodeRuntimeSettings } from './node-leftovers.js';
import { closeNodeNetns, openNodeNetns, type NodeNetns } from './node-netns.js';

const here = dirname(fileURLToPath(import.meta.url));

export interface TestNode {
  id: string;
  url: string;
  dataDir: string;
  logFile: string;
  /** The node's environment (its bridge, subnet, cgroup parent, listen address, ...). */
  env: Record<string, string>;
  /** Its network namespace, when started with `netns: true`. */
  netns?: NodeNetns;
  /** kill -9: its sandboxes keep running. */
  kill9(): Promise<void>;
  /** SIGTERM, waiting for the exit (a failure when it takes over STOP_GRACE_MS); its data stays. */
  shutdown(): Promise<void>;
  /** Sends a signal that does not end it (SIGSTOP, SIGCONT: a node that hangs, and is back). */
  signal(signal: 'SIGSTOP' | 'SIGCONT'): void;
  /** Starts the node process again (same id, port, data). */
  restart(): Promise<void>;
  /** Stops the process, destroys what its runtime still holds, removes its host setup and data. */
  stop(): Promise<void>;
}

export interface NodeOptions {
  id: string;
  verifyKey: string;
  databaseUrl?: string;
  leaseSeconds?: number;
  /** More of the node's environment. */
  env?: Record<string, string>;
  /**
   * Runs the node in a network namespace of its own (`node-netns.ts`), as a machine of its own on
   * the cluster's private network: it listens on its address there (port 7070), its sandboxes'
   * bridge and NAT are inside, and a `databaseUrl` on the host's loopback is reached at the host's
   * end of its link (start PostgreSQL with `clients: [NODE_NETNS_RANGE]`).
   */
  netns?: boolean;
  /**
   * Its registry credential's file: it registers through control's replicas, at these API ports
   * of the host (reached at the host's end of its link in a namespace), in this order.
   */
  registry?: { credentialFile: string; controlPorts: number[] };
}

/** The directories of cgroup `name` under /sys/fs/cgroup (each v1 hierarchy, or the v2 one). */
function cgroupDirs(name: string): string[] {
  const root = '/sys/fs/cgroup';
  const dirs = [join(root, name), ...readdirSync(root).map((h) => join(root, h, name))];
  return dirs.filter((d) => existsSync(d));
}

/** The port namespaced nodes listen on: each has an address of its own. */
const NETNS_NODE_PORT = 7070;

/** A URL on the host's loopback as a namespaced node reaches it: at the host's end of its link. */
function viaHost(url: string, hostAddress: string): string {
  const u = new URL(url);
  if (u.hostname === '127.0.0.1' || u.hostname === 'localhost') u.hostname = hostAddress;
  return u.toString();
}

/** Runs argv to its end; its stderr in the error when it fails. */
function runToEnd(argv: string[]): Promise<void> {
  return new Promise((res, reject) => {
    const child = spawn(argv[0]!, argv.slice(1), { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr!.setEncoding('utf8').on('data', (c: string) => (stderr += c));
    child.once('error', reject);
    child.once('close', (code) => (code === 0 ? res() : reject(new Error(`${argv.join(' ')}: exit ${code}: ${stderr.trim()}`))));
  });
}

/**
 * A `sandboxd node` process of a test's own (bridge, subnet, cgroup parent, data dir), registered
 * in `databaseUrl`'s registry when given, sharing the tests' layer directory (the layers are
 * there already, so it fetches none from control; SANDBOXD_LAYERS_DIR of its own in `env` makes it
 * fetch them, as on a machine of its own). On the host's loopback, or with `netns` in
 * a network namespace of its own. `verifyKey`: the PEM of the cluster's public key
 * (SANDBOXD_CLUSTER_VERIFY_KEY), whose private key control signs with.
 */
export async function startNode(o: NodeOptions): Promise<TestNode> {
  const { slot, release } = claimSlot();
  const cgroupParent = `sandboxd-test${slot}`;
  // The runtime names its sandboxes' namespaces after its cgroup parent (runtime/context.ts).
  const runtimeNetnsPrefix = `${cgroupParent}_`;
  let ns: NodeNetns | undefined;
  try {
    if (o.netns) ns = openNodeNetns(slot, runtimeNetnsPrefix);
  } catch (err) {
    release();
    throw err;
  }
  const dataDir = join(TEST_DATA_DIR, 'nodes', `${o.id}-${randomBytes(3).toString('hex')}`);
  mkdirSync(dataDir, { recursive: true });
  const host = ns?.address ?? '127.0.0.1';
  const port = ns ? NETNS_NODE_PORT : await freePort();
  const url = `http://${host}:${port}`;
  const env: Record<string, string> = {
    ...(process.env as Record<string, string>),
    SANDBOXD_DATA_DIR: dataDir,
    SANDBOXD_LAYERS_DIR: join(TEST_DATA_DIR, 'layers'),
    SANDBOXD_CGROUP_PARENT: cgroupParent,
    SANDBOXD_BRIDGE: `sbtest${slot}`,
    SANDBOXD_SUBNET: `10.${100 + (slot % 100)}.0.0/16`,
    SANDBOXD_NODE_ID: o.id,
    SANDBOXD_NODE_LISTEN: `${host}:${port}`,
    ...(ns ? { SANDBOXD_NODE_URL: url } : {}),
    SANDBOXD_CLUSTER_VERIFY_KEY: o.verifyKey,
    SANDBOXD_NODE_LEASE_SECONDS: String(o.leaseSeconds ?? 15),
    // As the test daemons (startServer): nodes share the host's filesystem, each counting only its
    // own disks against its free space.
    SANDBOXD_DISK_ADMISSION: 'off',
    // As test daemons: the node's warm pool holds no reserve at rest, only its floor per key asked.
    SANDBOXD_WARM_POOL_RESERVE: '0',
    ...(o.databaseUrl ? { SANDBOXD_DATABASE_URL: ns ? viaHost(o.databaseUrl, ns.hostAddress) : o.databaseUrl } : {}),
    ...(o.registry
      ? {
          SANDBOXD_NODE_CREDENTIAL_FILE: o.registry.credentialFile,
          SANDBOXD_CONTROL_URL: o.registry.controlPorts.map((p) => `http://${ns?.hostAddress ?? '127.0.0.1'}:${p}`).join(','),
        }
      : {}),
    ...o.env,
  };
  const settings: NodeRuntimeSettings = { dataDir, cgroupParent, bridge: env.SANDBOXD_BRIDGE!, subnet: env.SANDBOXD_SUBNET! };
  const logFile = join(dataDir, 'node.log');
  const argv = [...(ns?.exec ?? []), process.execPath, join(REPO_ROOT, 'packages/server/dist/cli.js'), 'node'];
  let child: ChildProcess | undefined;
  const launch = async () => {
    const out = createWriteStream(logFile, { flags: 'a', mode: 0o600 });
    // nsenter execs the node (no fork for these namespaces): the pid is the node's.
    child = spawn(argv[0]!, argv.slice(1), { env, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.pipe(out);
    child.stderr!.pipe(out);
    let exited = false;
    child.once('exit', () => (exited = true));
    for (const deadline = Date.now() + 120_000; Date.now() < deadline; ) {
      if (exited) throw new Error(`sandboxd node exited during start; see ${logFile}`);
      if (existsSync(logFile) && readFileSync(logFile, 'utf8').slice(-4096).includes(o.databaseUrl || o.registry ? `node ${o.id} registered` : 'serves its runtime')) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    child.kill('SIGKILL');
    throw new Error(`sandboxd node did not start; see ${logFile}`);
  };
  const exit = (signal: NodeJS.Signals) => endProcess(child, signal, `sandboxd node ${o.id}`, logFile);
  /**
   * What the node made, destroyed where it is (in its namespaces), then the namespace itself (its
   * mount namespace first: a mount there would keep a directory of the data dir busy). The data dir
   * stays when its sandboxes could not be destroyed.
   */
  const cleanUp = async () => {
    let destroyed = false;
    let left: string[] = [];
    try {
      if (ns) await runToEnd([...ns.exec, process.execPath, join(here, 'node-leftovers.js'), JSON.stringify(settings)]);
      else await destroyNodeRuntime(settings, REPO_ROOT);
      destroyed = true;
    } finally {
      try {
        if (ns) {
          closeNodeNetns(slot, runtimeNetnsPrefix);
          // Checked while the slot is ours: once released, the cgroup may be another daemon's.
          left = cgroupDirs(cgroupParent);
        }
        if (destroyed) rmSync(dataDir, { recursive: true, force: true });
      } finally {
        release();
      }
    }
    if (left.length > 0) throw new Error(`node ${o.id} left its cgroup parent: ${left.join(', ')}`);
  };
  try {
    await launch();
  } catch (err) {
    await exit('SIGKILL');
    // The clean-up removes the data dir, log included: its end goes with the error.
    const logTail = existsSync(logFile) ? readFileSync(logFile, 'utf8').split('\n').slice(-20).join('\n') : '(no log)';
    await cleanUp().catch((e: unknown) => process.stderr.write(`test harness: cleaning up after node ${o.id} failed to start: ${String(e)}\n`));
    throw new Error(`${(err as Error).message.replace(`; see ${logFile}`, '')}; its log's last lines:\n${logTail}`, { cause: err });
  }
  return {
    id: o.id,
    url,
    dataDir,
    logFile,
    env,
    netns: ns,
    kill9: () => exit('SIGKILL'),
    shutdown: () => exit('SIGTERM'),
    signal: (signal) => {
      if (child && child.exitCode === null && child.signalCode === null) child.kill(signal);
    },
    restart: launch,
    stop: async () => {
      try {
        // A node left stopped by a drill that failed would never end on SIGTERM.
        if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGCONT');
        await exit('SIGTERM');
      } finally {
        await cleanUp();
      }
    },
  };
}
