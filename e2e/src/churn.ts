// Churn: many create → one command → delete cycles against a real daemon, and the host-level count
// that proves they left nothing behind. Driven by the churn test (e2e/src/churn.test.ts, a few
// hundred cycles) and the soak benchmark (bench/src/soak.ts, thousands).
import { readFileSync } from 'node:fs';
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import WebSocket from 'ws';
import { api, type TestServer } from './harness.js';
import { loadConfig } from '../../packages/server/dist/config/index.js';
import { CrunRuntime } from '../../packages/server/dist/runtime/index.js';
import {
  daemonObjects,
  OBJECT_KINDS,
  processFacts,
  type DaemonObjects,
  type DaemonScope,
  type ObjectKind,
  type OwnedItem,
  type ProcessFacts,
} from '../../packages/server/dist/testing/host-objects.js';

export const CHURN_TEMPLATES = ['base', 'code-interpreter'];

/**
 * Settings a churn daemon needs beside the harness's: creates far above the default rate limit of a
 * client (120 a minute). Quotas stay at their defaults, so that usage which a delete failed to give
 * back shows as refused creates.
 */
// No demand horizon: the warm pool keeps its floor whatever the churn rate, so "at rest" is a fixed
// count and anything beyond it is a leak (the pool's growth with demand has tests of its own).
export const CHURN_ENV: Record<string, string> = { SANDBOXD_RATE_LIMIT_CREATES_PER_MINUTE: '1000000', SANDBOXD_WARM_POOL_HORIZON_SECONDS: '0' };

export interface Cycle {
  i: number;
  template: string;
  internet: boolean;
}

/** Every 4 cycles cover each template with and without internet access, so both alternate per template. */
export function cycleOf(i: number): Cycle {
  return { i, template: CHURN_TEMPLATES[i % 2]!, internet: Math.floor(i / 2) % 2 === 0 };
}

export interface CycleResult extends Cycle {
  createMs: number;
  cycleMs: number;
  /** What went wrong (create refused, wrong output, delete failed); undefined when the cycle was right. */
  error?: string;
}

/** `echo` proves the command ran in this sandbox; the interface list proves its network setting. */
export function commandOf(c: Cycle): { command: string; stdout: string } {
  return { command: `echo churn-${c.i}; ls /sys/class/net`, stdout: `churn-${c.i}\n${c.internet ? 'eth0\nlo\n' : 'lo\n'}` };
}

/**
 * One POST to the agent through the gateway on a connection of its own, as a new client of a new
 * sandbox has: a kept-alive connection to a gateway port that a deleted sandbox had and a new one
 * reuses would measure the client's pool, not the daemon.
 */
function agentPost(publicHost: string, token: string, path: string, body: unknown): Promise<{ status: number; body: any }> {
  const url = new URL(publicHost);
  const text = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: url.hostname,
        port: url.port,
        path,
        method: 'POST',
        agent: false,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) },
        timeout: 60_000,
      },
      (res) => {
        let data = '';
        res.setEncoding('utf8');
        res.on('data', (c: string) => (data += c));
        res.on('end', () => {
          try {
            resolve({ status: res.statusCode ?? 0, body: JSON.parse(data) });
          } catch {
            resolve({ status: res.statusCode ?? 0, body: data });
          }
        });
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error(`${path}: no answer in 60 s`)));
    req.on('error', reject);
    req.end(text);
  });
}

async function runCycle(server: TestServer, c: Cycle): Promise<CycleResult> {
  const t0 = performance.now();
  const created = await api(server, 'POST', '/v1/sandboxes', { template_name: c.template, internet_access: c.internet }).catch((err: unknown) => ({
    status: 0,
    body: String(err),
  }));
  const createMs = performance.now() - t0;
  const result = (error?: string): CycleResult => ({ ...c, createMs, cycleMs: performance.now() - t0, ...(error ? { error } : {}) });
  if (created.status !== 201) return result(`create: ${created.status} ${JSON.stringify(created.body)}`);
  const id: string = created.body.id;
  let error: string | undefined;
  try {
    const want = commandOf(c);
    const r = await agentPost(created.body.public_host, created.body.auth_token, '/commands/run', { command: want.command, timeout: 30 });
    if (r.status !== 200 || r.body?.exit_code !== 0 || r.body?.stdout !== want.stdout) {
      error = `${id} command: ${r.status} ${JSON.stringify(r.body)} (wanted stdout ${JSON.stringify(want.stdout)})`;
    }
  } catch (err) {
    error = `${id} command: ${String(err)}`;
  } finally {
    const del = await api(server, 'DELETE', `/v1/sandboxes/${id}`).catch((err: unknown) => ({ status: 0, body: String(err) }));
    if (del.status !== 200 && del.status !== 204) error = `${error ? `${error}; ` : ''}${id} delete: ${del.status} ${JSON.stringify(del.body)}`;
  }
  return result(error);
}

/** Cycles `first` .. `first + count - 1`, `concurrency` at a time (each worker takes the next). */
export async function runCycles(server: TestServer, first: number, count: number, concurrency: number): Promise<CycleResult[]> {
  const out: CycleResult[] = [];
  let next = first;
  const worker = async () => {
    while (next < first + count) out.push(await runCycle(server, cycleOf(next++)));
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(concurrency, count)) }, worker));
  return out.sort((a, b) => a.i - b.i);
}

/** The host-global names of a harness daemon, derived as the daemon derives them. */
export function scopeOf(server: TestServer): DaemonScope {
  const config = loadConfig(server.env);
  const rt = new CrunRuntime({
    dataDir: config.dataDir,
    agentBundlePath: config.agentBundlePath,
    cgroupParent: config.runtime.cgroupParent,
    bridgeName: config.runtime.bridge,
    subnetCidr: config.runtime.subnet,
  });
  return {
    dataDir: rt.dataDir,
    cgroupParent: rt.cgroupParent,
    netnsPrefix: rt.netnsName(''),
    bridge: rt.bridge,
    gatewayPorts: { min: config.gateway.portMin, max: config.gateway.portMax },
    pid: server.pid,
  };
}

/** Ready sandboxes the daemon may hold with nobody's sandbox alive: the warm pool's floor per key (no horizon: CHURN_ENV), a key per template and network setting. */
export function warmPoolCapacity(server: TestServer): number {
  return loadConfig(server.env).warmPool.minPerKey * CHURN_TEMPLATES.length * 2;
}

/** Spare disks runtime/disk-pool.ts keeps formatted per disk size (CrunRuntime's default). */
export const SPARE_DISKS_PER_SIZE = 2;

/** The daemon at rest: no sandbox of anyone alive, its pools refilled. */
export interface Checkpoint {
  cycles: number;
  objects: DaemonObjects;
  facts: ProcessFacts;
  /** What the organization's quota still counts (all 0 when every delete gave back its share). */
  usage: { sandboxes: number; memoryMb: number; diskGb: number };
  /** Sandboxes the API still lists. */
  listed: string[];
  /** Time it took to come to rest; `settled` false when it did not within the timeout. */
  settleMs: number;
  settled: boolean;
}

const signature = (o: DaemonObjects) => OBJECT_KINDS.map((k) => o[k].map((x) => x.what).sort().join('\n')).join('\n--\n');

/**
 * Waits until the daemon is at rest: nothing listed by the API, and two counts of its host objects
 * a second apart are the same (the warm pool and the disk pool refill in the background after the
 * last create, and a sandbox's teardown may finish a moment after its delete answered).
 */
export async function checkpoint(server: TestServer, scope: DaemonScope, cycles: number, timeoutMs = 120_000): Promise<Checkpoint> {
  const t0 = performance.now();
  let prev: string | undefined;
  for (;;) {
    const list = await api(server, 'GET', '/v1/sandboxes?limit=1000');
    const listed: string[] = list.status === 200 ? list.body.data.map((s: { id: string }) => s.id) : [`(list failed: ${list.status})`];
    const objects = daemonObjects(scope);
    const sig = signature(objects);
    const timedOut = performance.now() - t0 > timeoutMs;
    if ((listed.length === 0 && sig === prev) || timedOut) {
      const limits = await api(server, 'GET', '/v1/account/limits');
      return {
        cycles,
        objects,
        facts: processFacts(scope.pid!),
        usage: {
          sandboxes: limits.body.concurrent_sandboxes.used,
          memoryMb: limits.body.committed_memory_mb.used,
          diskGb: limits.body.committed_disk_gb.used,
        },
        listed,
        settleMs: performance.now() - t0,
        settled: !timedOut,
      };
    }
    prev = sig;
    await sleep(1000);
  }
}

export interface KindReport {
  kind: ObjectKind;
  count: number;
  /** Of the warm pool's ready sandboxes. */
  pool: number;
  /** Of the runtime's spare disks (disk-pool/). */
  spare: number;
  leaked: string[];
}

export interface Verdict {
  kinds: KindReport[];
  /** Every leak, one line each; empty when nothing leaked. */
  leaks: string[];
}

/**
 * What of a checkpoint is a leak. With no sandbox of anyone alive, an object may belong only to a
 * ready sandbox of the warm pool (a running container, at most the pool's capacity of them) or to a
 * spare disk (at most SPARE_DISKS_PER_SIZE per size); files elsewhere in the data dir and gateway
 * ports, which belong to no sandbox, may not be more than at the baseline.
 */
export function judge(cp: Checkpoint, baseline: Checkpoint, poolCapacity: number): Verdict {
  const leaks: string[] = [];
  const live = new Set(cp.objects.containers.map((c) => c.what));
  const kinds: KindReport[] = [];
  // Spare disks allowed: per size directory, up to the pool's size.
  const spareDisks = new Map<string, number>();
  for (const e of cp.objects.dataDirEntries.filter((e) => e.owner === 'disk-pool')) {
    const size = e.what.split('/')[1]!;
    spareDisks.set(size, (spareDisks.get(size) ?? 0) + 1);
  }
  const spareAllowed = [...spareDisks.values()].reduce((a, n) => a + Math.min(n, SPARE_DISKS_PER_SIZE), 0);
  for (const kind of OBJECT_KINDS) {
    const items: OwnedItem[] = cp.objects[kind];
    const report: KindReport = { kind, count: items.length, pool: 0, spare: 0, leaked: [] };
    if (kind === 'otherFiles' || kind === 'gatewayPorts') {
      const before = new Set(baseline.objects[kind].map((x) => x.what));
      report.leaked = items.filter((x) => !before.has(x.what)).map((x) => x.what);
    } else {
      const spares: string[] = [];
      for (const x of items) {
        if (x.owner === 'disk-pool') spares.push(x.what);
        else if (x.owner !== undefined && live.has(x.owner)) report.pool++;
        else report.leaked.push(x.what);
      }
      report.spare = Math.min(spares.length, spareAllowed);
      report.leaked.push(...spares.slice(spareAllowed).map((w) => `${w} (more spare disks than the disk pool keeps)`));
    }
    kinds.push(report);
    for (const w of report.leaked) leaks.push(`${kind}: ${w}`);
  }
  if (live.size > poolCapacity) leaks.push(`containers: ${live.size} running with no sandbox alive, more than the warm pool holds (${poolCapacity}): ${[...live].join(', ')}`);
  if (!cp.settled) leaks.push(`the daemon did not come to rest in ${Math.round(cp.settleMs / 1000)} s (its objects kept changing)`);
  if (cp.listed.length) leaks.push(`sandboxes still listed by the API: ${cp.listed.join(', ')}`);
  for (const [k, v] of Object.entries(cp.usage)) if (v !== 0) leaks.push(`quota usage ${k} is ${v} with no sandbox alive`);
  return { kinds, leaks };
}

/** Relative growth of the daemon's RSS and open fds since `baseline`. */
export function drift(cp: Checkpoint, baseline: Checkpoint): { rss: number; fds: number } {
  return { rss: cp.facts.rssKiB / baseline.facts.rssKiB - 1, fds: cp.facts.fds / baseline.facts.fds - 1 };
}

/**
 * A daemon started with this env opens the V8 inspector on a loopback port of its choosing (printed
 * to its log), so that its JS heap can be measured after a forced GC: RSS at rest moves by several
 * MiB with V8's lazy sizing, the live heap after GC by a few KiB, which makes a small per-sandbox
 * leak visible within a few thousand cycles.
 */
export const INSPECT_ENV: Record<string, string> = { NODE_OPTIONS: '--inspect=127.0.0.1:0' };

export class DaemonInspector {
  private nextId = 0;
  private readonly pending = new Map<number, (result: any) => void>();

  private constructor(private readonly ws: WebSocket) {
    ws.on('message', (data) => {
      const msg = JSON.parse(String(data)) as { id?: number; result?: unknown };
      if (msg.id !== undefined) this.pending.get(msg.id)?.(msg.result);
      if (msg.id !== undefined) this.pending.delete(msg.id);
    });
  }

  static async connect(server: TestServer, timeoutMs = 10_000): Promise<DaemonInspector> {
    const deadline = Date.now() + timeoutMs;
    let url: string | undefined;
    while (!(url = /ws:\/\/127\.0\.0\.1:\d+\/[\w-]+/.exec(readFileSync(server.logFile, 'utf8'))?.[0])) {
      if (Date.now() > deadline) throw new Error(`the daemon printed no inspector address to ${server.logFile} (started without INSPECT_ENV?)`);
      await sleep(100);
    }
    const ws = new WebSocket(url);
    await new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('error', reject);
    });
    return new DaemonInspector(ws);
  }

  private call(method: string, params: Record<string, unknown> = {}): Promise<any> {
    const id = ++this.nextId;
    return new Promise((resolve) => {
      this.pending.set(id, resolve);
      this.ws.send(JSON.stringify({ id, method, params }));
    });
  }

  /** The daemon's used JS heap after two full collections (the second takes what finalizers freed). */
  async heapAfterGcKiB(): Promise<number> {
    await this.call('HeapProfiler.collectGarbage');
    await this.call('HeapProfiler.collectGarbage');
    const { usedSize } = (await this.call('Runtime.getHeapUsage')) as { usedSize: number };
    return Math.round(usedSize / 1024);
  }

  close(): void {
    this.ws.close();
  }
}
