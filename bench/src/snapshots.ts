// bench/snapshots: snapshots, forks, creates from a snapshot and rollbacks (issue 13) through a real
// daemon and real containers, each next to a baseline measured in the same run:
//
//   1. a snapshot of a running sandbox with 100 MiB of changes (2 × 20 MiB, 40 × 1 MiB, 160 × 128 KiB
//      of /dev/urandom under /workspace/data), p50 of POST /snapshots → 201, against a plain
//      `cp -a` on the host of the same tree (the first snapshot's layer, on the data dir's
//      filesystem, into a directory beside it). Goal ≤ 1 s and ≤ 2× the copy. The host's page cache
//      is flushed (`sync`, not timed) before each of both, so neither pays for the other's writeback.
//      A diagnostic row times the same `cp -a` from the sandbox's own disk (its loop device mounted
//      once more on the host, as the daemon mounts it for the copy): what reading through the
//      sandbox's ext4 image costs, apart from the daemon's own work.
//      The daemon's own figures for each copy (bytes, entries, frozen_ms) come from its log.
//   2. a fork of that sandbox into 5, POST /fork → all 5 answered a command through their agents.
//      Goal ≤ 1 s. Baseline: the same fork of a sandbox of the same template with no files of its
//      own (what booting 5 forks costs without the 100 MiB to copy), alternated with it; the page
//      cache is flushed before each, as for the snapshots (the fork copies as a snapshot does).
//   3. create → first command answered, from a snapshot (that one) against from its template, both
//      warm (the pool has seen both keys: a warm-up first, then 4 × ROUNDS of each, alternated, each create waiting
//      until the pool is refilled and checked to be a pool hit in the daemon's metrics). Goal ≤ 1.2×.
//      Also the first (cold) create from each fresh snapshot, against the first create of the template
//      (also cold: the pool had not seen its key; one sample, after a create with another network
//      setting took the daemon's first-boot costs), both checked to be pool misses.
//   4. a rollback: POST /restore to the first snapshot after writing 1 MiB, until its agent answers
//      a command again. Goal ≤ 500 ms. Baseline: POST /stop then POST /start of the same sandbox,
//      until its agent answers (a restore is a stop, a fresh disk and a boot).
//   5. host disk used by 10 forks of that sandbox that each wrote 1 MiB (then `sync` inside and on
//      the host). Accounting: the bytes du counts in the fork's new layer under
//      <dataDir>/snapshot-layers (the one copy of the source's changes all 10 mount), plus each
//      fork's disk image as allocated on the host (st_blocks × 512 of sandboxes/<id>/disk.img).
//      Each disk image is also measured just after the fork, before its 1 MiB: that part is the
//      ext4 image's own metadata (and the agent's few state files), a fixed cost every sandbox's
//      disk has with or without forks, reported on its own (with a plain sandbox's image beside it).
//      Goal: layer + Σ(image growth from its 1 MiB) ≤ (source's changes + 10 × 1 MiB) × 1.05, where
//      the source's changes are what du counts of the source's own snapshot layer (the same files).
//      Cross-checks: the growth of `du -x` of the whole data dir over the same steps (it also counts
//      the disk pool refilling its formatted spare images, the daemon's log and database), and the
//      df delta of its filesystem (host-wide: anything else writing on the host counts too).
//
// Pool refills, teardowns and the collection of unused layers run in the background: before every
// timed step the benchmark waits until the pool boots nothing, every container and sandbox directory
// is a live sandbox's or a ready one, and the layer store holds our snapshots' layers only.
//
// Where a snapshot's time goes (strace of the daemon, 100 MiB): `crun state` ~15 ms, then frozen:
// the checks and `mount` of the disk's loop device ~15 ms, `cp -a` out of the sandbox's ext4 image
// (1.1–1.6× the same copy between host directories: the diagnostic row), `umount` ~8 ms; then the
// ids shifted to canonical ~15 ms, the rename and the row. frozen_ms is most of the total.
// Usage (root, after npm run build): node bench/dist/snapshots.js [ROUNDS=5]
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statfsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { agent, api, createSandbox, crunContainers, startServer, type CreatedSandbox, type TestServer } from '../../e2e/dist/harness.js';
import { fmt, row, summary } from './stats.js';

const ROUNDS = Number(process.argv[2] ?? 5);
if (!Number.isInteger(ROUNDS) || ROUNDS < 1) throw new Error(`ROUNDS must be a positive integer, got ${process.argv[2]}`);

/** Warm creates of each kind: they are cheap (tens of ms) and their medians noisy, so 4 per round. */
const WARM = 4 * ROUNDS;
const MiB = 1024 * 1024;
const CREATE = { template_name: 'base', internet_access: false, timeout_seconds: 1800 };

/** 100 MiB of incompressible files: a few big, some middling, many small, in nested directories. */
const WRITE_100MB = [
  'set -e; d=/workspace/data; mkdir -p $d/big $d/mid',
  'for i in 1 2; do head -c 20971520 /dev/urandom > $d/big/f$i.bin; done',
  'for i in $(seq 1 40); do head -c 1048576 /dev/urandom > $d/mid/f$i.bin; done',
  'for j in $(seq 1 8); do mkdir -p $d/small/d$j; for i in $(seq 1 20); do head -c 131072 /dev/urandom > $d/small/d$j/f$i.bin; done; done',
  'sync; du -sb $d | cut -f1',
].join('\n');

const server: TestServer = await startServer({
  templates: ['base'],
  env: {
    SANDBOXD_MAX_SANDBOXES: '0',
    SANDBOXD_MAX_TOTAL_MEMORY_MB: '0',
    SANDBOXD_MAX_TOTAL_DISK_GB: '0',
    SANDBOXD_RATE_LIMIT_CREATES_PER_MINUTE: '100000',
  },
});
const layersDir = join(server.dataDir, 'snapshot-layers');
const cpDir = join(server.dataDir, 'bench-cp');
const snapshots = new Set<string>();

const asSandbox = (b: any): CreatedSandbox => ({ id: b.id, publicHost: b.public_host, authToken: b.auth_token, body: b });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function sh(sb: CreatedSandbox, script: string): Promise<string> {
  const r = await agent(sb, 'POST', '/commands/run', { command: 'sh', args: ['-c', script], timeout: 120 });
  if (r.status !== 200 || r.body.exit_code !== 0) throw new Error(`command in ${sb.id}: ${r.status} ${JSON.stringify(r.body).slice(0, 500)}`);
  return r.body.stdout;
}

/** One command through the agent: "ready" back. */
async function answers(sb: CreatedSandbox): Promise<void> {
  const r = await agent(sb, 'POST', '/commands/run', { command: 'echo ready' });
  if (r.status !== 200 || r.body.stdout !== 'ready\n') throw new Error(`first command in ${sb.id}: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`);
}

async function must(what: string, p: Promise<{ status: number; body: any }>, status = 200): Promise<any> {
  const r = await p;
  if (r.status !== status) throw new Error(`${what}: ${r.status} ${JSON.stringify(r.body).slice(0, 500)}`);
  return r.body;
}

async function del(id: string): Promise<void> {
  await must(`delete ${id}`, api(server, 'DELETE', `/v1/sandboxes/${id}`));
}

async function delSnapshot(id: string): Promise<void> {
  await must(`delete snapshot ${id}`, api(server, 'DELETE', `/v1/snapshots/${id}`));
  snapshots.delete(id);
}

async function snapshot(sb: CreatedSandbox): Promise<any> {
  const s = await must('snapshot', api(server, 'POST', `/v1/sandboxes/${sb.id}/snapshots`, {}), 201);
  snapshots.add(s.snapshot_id);
  return s;
}

/** The warm pool's figures from /metrics. */
async function pool(): Promise<{ ready: number; booting: number; hits: number; misses: number }> {
  const res = await fetch(`${server.baseUrl}/metrics`, { headers: { 'x-api-key': server.apiKey } });
  const text = await res.text();
  const v = (re: RegExp) => Number(re.exec(text)?.[1] ?? NaN);
  return {
    ready: v(/^sandboxd_warm_pool_sandboxes\{state="ready"\} (\S+)/m),
    booting: v(/^sandboxd_warm_pool_sandboxes\{state="booting"\} (\S+)/m),
    hits: v(/^sandboxd_warm_pool_acquires_total\{result="hit"\} (\S+)/m),
    misses: v(/^sandboxd_warm_pool_acquires_total\{result="miss"\} (\S+)/m),
  };
}

const layerIds = () => (existsSync(layersDir) ? readdirSync(layersDir).filter((n) => /^[0-9a-f]{64}$/.test(n)) : []);
const layerTmp = () => (existsSync(layersDir) ? readdirSync(layersDir).filter((n) => n.startsWith('.tmp-')) : []);

/**
 * Waits until nothing runs in the background: the pool boots nothing, every container and sandbox
 * directory is a live sandbox's or a ready one of the pool (teardowns done), and the snapshot layer
 * store holds the layers of our snapshots only (the forks' layers are collected, none being removed).
 */
async function settle(): Promise<void> {
  const end = Date.now() + 60_000;
  let last = '';
  for (;;) {
    const p = await pool();
    const list = await api(server, 'GET', '/v1/sandboxes?limit=1000');
    const live = (list.body.data as any[]).filter((s) => s.status === 'running' || s.status === 'paused').length;
    const containers = crunContainers(server.dataDir).length;
    const dirs = readdirSync(join(server.dataDir, 'sandboxes')).length;
    const tmp = layerTmp().length;
    const layers = layerIds().length;
    if (p.booting === 0 && containers === live + p.ready && dirs === containers && tmp === 0 && layers === snapshots.size) return;
    last = `booting ${p.booting}, containers ${containers} vs ${live} live + ${p.ready} ready, ${dirs} sandbox dirs, ${tmp} layer(s) in the making or going, ${layers} layers for ${snapshots.size} snapshots`;
    if (Date.now() > end) {
      console.log(`# warning: the daemon did not settle in 60 s (${last}); measuring anyway`);
      return;
    }
    await sleep(100);
  }
}

function hostSync(): void {
  spawnSync('sync', { stdio: 'ignore' });
}

/** Bytes du counts (allocated blocks) under `path`. */
function du(path: string): number {
  const r = spawnSync('du', ['-s', '-B1', path], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`du ${path}: ${r.stderr}`);
  return Number(r.stdout.split('\t')[0]);
}

const diskImage = (id: string) => join(server.dataDir, 'sandboxes', id, 'disk.img');
const allocated = (file: string) => statSync(file).blocks * 512;
/** Bytes du counts in the data dir, on its own filesystem only (not the sandboxes' mounted disks and rootfs). */
const dataDirUsed = () => {
  const r = spawnSync('du', ['-s', '-x', '-B1', server.dataDir], { encoding: 'utf8' });
  return Number(r.stdout.split('\t')[0]);
};
const fsUsed = () => {
  const s = statfsSync(server.dataDir);
  return (s.blocks - s.bfree) * s.bsize;
};
const mib = (bytes: number) => `${(bytes / MiB).toFixed(1)} MiB`;
const median = (xs: number[]) => summary(xs).p50;
const goal = (ok: boolean) => (ok ? 'met' : 'MISSED');

/**
 * ms of `cp -a` of a running sandbox's upper (its disk's loop device mounted a second time on the
 * host, not frozen: it is idle) into `dest`, or undefined when its loop device is not recorded.
 */
function cpFromDisk(id: string, dest: string): number | undefined {
  const rec = join(server.dataDir, 'sandboxes', id, 'disk.loop');
  if (!existsSync(rec)) return undefined;
  const mnt = join(cpDir, 'mnt');
  mkdirSync(mnt, { recursive: true });
  mkdirSync(dest, { recursive: true });
  hostSync();
  execFileSync('mount', ['-t', 'ext4', '-o', 'noatime,nosuid,nodev,noexec', readFileSync(rec, 'utf8').trim(), mnt]);
  try {
    const t0 = performance.now();
    execFileSync('cp', ['-a', '--', `${join(mnt, 'upper')}/.`, dest]);
    return performance.now() - t0;
  } finally {
    execFileSync('umount', [mnt]);
  }
}

/** The daemon's log lines with this message, parsed (JSON lines). */
function daemonLog(msg: string): any[] {
  const out: any[] = [];
  for (const line of readFileSync(server.logFile, 'utf8').split('\n')) {
    if (!line.includes(msg)) continue;
    try {
      const j = JSON.parse(line);
      if (j.msg === msg || j.message === msg) out.push(j);
    } catch {
      /* not JSON */
    }
  }
  return out;
}

/** Create → first command answered; whether the pool had one ready (hit) or it booted one (miss). */
async function createAndRun(body: Record<string, unknown>): Promise<{ ms: number; createMs: number; hit: boolean; sb: CreatedSandbox }> {
  const before = await pool();
  const t0 = performance.now();
  const sb = asSandbox(await must('create', api(server, 'POST', '/v1/sandboxes', body), 201));
  const createMs = performance.now() - t0;
  await answers(sb);
  const ms = performance.now() - t0;
  const after = await pool();
  return { ms, createMs, hit: after.hits > before.hits, sb };
}

try {
  // ---- the source: a cold create of the template --------------------------------------------------
  // The daemon's first boot pays for things once (the template layer's first idmapped mounts, the
  // agent runtime): a create with another network setting (another pool key) takes that first, so
  // the source's create is a cold one of the template like any later first create of a key.
  await del((await createAndRun({ ...CREATE, internet_access: true })).sb.id);
  await settle();
  const first = await createAndRun(CREATE);
  if (first.hit) console.log('# note: the first create of the template was served by the pool');
  const coldTemplateMs = first.ms;
  const src = first.sb;
  const written = Number((await sh(src, WRITE_100MB)).trim());
  const clean = await createSandbox(server, CREATE);
  await answers(clean);
  console.log(`source ${src.id}: ${mib(written)} written under /workspace/data (du -sb inside); ${ROUNDS} rounds`);

  // ---- 1. snapshot of 100 MiB of changes, against cp -a of the same tree ----------------------------
  const snapMs: number[] = [];
  const cpMs: number[] = [];
  const cpDiskMs: number[] = [];
  const coldSnapMs: number[] = [];
  let coldSnapMisses = 0;
  let keep: any;
  let keepLayer = '';
  mkdirSync(cpDir, { recursive: true, mode: 0o700 });
  for (let i = 0; i < ROUNDS; i++) {
    await settle();
    const before = new Set(layerIds());
    hostSync();
    let t0 = performance.now();
    const snap = await snapshot(src);
    snapMs.push(performance.now() - t0);
    if (i === 0) {
      keep = snap;
      keepLayer = layerIds().find((l) => !before.has(l)) ?? '';
      if (!keepLayer) throw new Error('the snapshot made no layer in the store');
    }
    // The same tree, on the same filesystem, copied as exportLayer copies: contents into an empty dir.
    const dest = join(cpDir, String(i));
    mkdirSync(dest);
    hostSync();
    t0 = performance.now();
    const cp = spawnSync('cp', ['-a', '--', `${join(layersDir, keepLayer, 'tree')}/.`, dest], { stdio: 'ignore' });
    cpMs.push(performance.now() - t0);
    if (cp.status !== 0) throw new Error('cp -a failed');
    rmSync(dest, { recursive: true, force: true });
    // Diagnostic: the same cp -a, but from the sandbox's own disk (its loop device mounted once more
    // on the host, as the daemon does): what reading through the sandbox's ext4 image costs.
    const viaDisk = cpFromDisk(src.id, dest);
    if (viaDisk !== undefined) cpDiskMs.push(viaDisk);
    rmSync(dest, { recursive: true, force: true });
    // The first create from this fresh snapshot: its key was never asked for.
    await settle();
    const cold = await createAndRun({ snapshot_id: snap.snapshot_id, internet_access: false, timeout_seconds: 1800 });
    coldSnapMs.push(cold.ms);
    if (!cold.hit) coldSnapMisses++;
    await del(cold.sb.id);
    if (i > 0) await delSnapshot(snap.snapshot_id);
  }
  const taken = daemonLog('snapshot taken');
  const snapP50 = median(snapMs);
  const cpP50 = median(cpMs);

  // ---- 2. fork into 5, until all 5 answer; baseline: the same of a sandbox without changes --------
  const forkMs: number[] = [];
  const forkRespMs: number[] = [];
  const cleanForkMs: number[] = [];
  const cleanForkRespMs: number[] = [];
  const fork5 = async (of: CreatedSandbox, total: number[], resp: number[]) => {
    await settle();
    hostSync();
    const t0 = performance.now();
    const r = await must('fork', api(server, 'POST', `/v1/sandboxes/${of.id}/fork`, { count: 5 }), 201);
    resp.push(performance.now() - t0);
    const forks = (r.data as any[]).map(asSandbox);
    await Promise.all(forks.map(answers));
    total.push(performance.now() - t0);
    for (const f of forks) await del(f.id);
  };
  for (let i = 0; i < ROUNDS; i++) {
    if (i % 2 === 0) {
      await fork5(src, forkMs, forkRespMs);
      await fork5(clean, cleanForkMs, cleanForkRespMs);
    } else {
      await fork5(clean, cleanForkMs, cleanForkRespMs);
      await fork5(src, forkMs, forkRespMs);
    }
  }
  const forked = daemonLog('sandbox forked');

  // ---- 5. disk used by 10 forks that each changed 1 MiB -------------------------------------------
  await settle();
  hostSync();
  const dfBefore = fsUsed();
  const duBefore = dataDirUsed();
  const layersBefore = new Set(layerIds());
  const r10 = await must('fork 10', api(server, 'POST', `/v1/sandboxes/${src.id}/fork`, { count: 10 }), 201);
  const forks10 = (r10.data as any[]).map(asSandbox);
  const forkLayers = layerIds().filter((l) => !layersBefore.has(l));
  await Promise.all(forks10.map((f) => sh(f, 'sync')));
  hostSync();
  const fixed = forks10.map((f) => allocated(diskImage(f.id)));
  await Promise.all(forks10.map((f) => sh(f, 'head -c 1048576 /dev/urandom > /workspace/mine.bin && sync')));
  hostSync();
  const grown = forks10.map((f, i) => allocated(diskImage(f.id)) - fixed[i]!);
  const dfDelta = fsUsed() - dfBefore;
  const duDelta = dataDirUsed() - duBefore;
  const forkLayerBytes = forkLayers.reduce((n, l) => n + du(join(layersDir, l)), 0);
  const sourceChanges = du(join(layersDir, keepLayer));
  const storeTotal = du(layersDir);
  await sh(clean, 'sync');
  await sh(src, 'sync');
  hostSync();
  const cleanImage = allocated(diskImage(clean.id));
  const srcImage = allocated(diskImage(src.id));
  for (const f of forks10) await del(f.id);

  // ---- 3. create from the snapshot vs from its template, both warm --------------------------------
  const FROM_SNAP = { snapshot_id: keep.snapshot_id, internet_access: false, timeout_seconds: 1800 };
  for (let i = 0; i < 2; i++) {
    for (const body of [FROM_SNAP, CREATE]) {
      await settle();
      await del((await createAndRun(body)).sb.id);
    }
  }
  const warmSnap: number[] = [];
  const warmTpl: number[] = [];
  const warmSnapCreate: number[] = [];
  const warmTplCreate: number[] = [];
  let warmMisses = 0;
  for (let i = 0; i < WARM; i++) {
    const order: Array<[Record<string, unknown>, number[], number[]]> = [
      [FROM_SNAP, warmSnap, warmSnapCreate],
      [CREATE, warmTpl, warmTplCreate],
    ];
    if (i % 2) order.reverse();
    for (const [body, out, outCreate] of order) {
      await settle();
      const r = await createAndRun(body);
      out.push(r.ms);
      outCreate.push(r.createMs);
      if (!r.hit) warmMisses++;
      await del(r.sb.id);
    }
  }

  // ---- 4. rollback until the agent answers; baseline: stop + start --------------------------------
  const restoreMs: number[] = [];
  const restoreRespMs: number[] = [];
  const restartMs: number[] = [];
  const untilAnswers = async (sb: CreatedSandbox) => {
    for (let n = 0; ; n++) {
      const r = await agent(sb, 'POST', '/commands/run', { command: 'echo ready' }).catch(() => undefined);
      if (r?.status === 200 && r.body.stdout === 'ready\n') return;
      if (n > 200) throw new Error(`${sb.id} does not answer: ${r?.status} ${JSON.stringify(r?.body).slice(0, 300)}`);
      await sleep(10);
    }
  };
  const rollback = async () => {
    await sh(src, 'head -c 1048576 /dev/urandom > /workspace/after.bin && sync');
    await settle();
    const t0 = performance.now();
    await must('restore', api(server, 'POST', `/v1/sandboxes/${src.id}/restore`, { snapshot_id: keep.snapshot_id }));
    restoreRespMs.push(performance.now() - t0);
    await untilAnswers(src);
    restoreMs.push(performance.now() - t0);
    const check = await sh(src, 'test -e /workspace/after.bin && echo still-there || echo gone; du -sb /workspace/data | cut -f1');
    if (check !== `gone\n${written}\n`) throw new Error(`after the restore: ${JSON.stringify(check)}`);
  };
  const restart = async () => {
    await settle();
    const t0 = performance.now();
    await must('stop', api(server, 'POST', `/v1/sandboxes/${src.id}/stop`));
    await must('start', api(server, 'POST', `/v1/sandboxes/${src.id}/start`));
    await untilAnswers(src);
    restartMs.push(performance.now() - t0);
  };
  for (let i = 0; i < ROUNDS; i++) {
    if (i % 2 === 0) {
      await rollback();
      await restart();
    } else {
      await restart();
      await rollback();
    }
  }

  // ---- report -------------------------------------------------------------------------------------
  const frozen = taken.map((l) => Number(l.frozen_ms));
  console.log('\n1. snapshot of a running sandbox with 100 MiB of changes (POST /snapshots → 201)');
  console.log(row('snapshot', snapMs, cpMs));
  console.log(row('cp -a of the same tree (baseline)', cpMs));
  if (cpDiskMs.length) console.log(row('  cp -a from the sandbox\'s disk (diag.)', cpDiskMs, cpMs));
  if (taken.length) {
    const t = taken[taken.length - 1];
    console.log(`   daemon: ${mib(Number(t.bytes))}, ${t.entries} entries a copy; frozen p50 ${fmt(median(frozen))} (max ${fmt(Math.max(...frozen))})`);
  }
  console.log(`   p50 ${fmt(snapP50)}: ≤ 1 s ${goal(snapP50 <= 1000)}; ${(snapP50 / cpP50).toFixed(2)}× cp -a: ≤ 2× ${goal(snapP50 <= 2 * cpP50)}`);

  console.log('\n2. fork into 5 (POST /fork → all 5 answered a command)');
  console.log(row('fork 5 of the 100 MiB sandbox', forkMs, cleanForkMs));
  console.log(row('  of which POST /fork → 201', forkRespMs, cleanForkRespMs));
  console.log(row('fork 5 of a clean sandbox (baseline)', cleanForkMs));
  const bigForks = forked.filter((l) => l.id === src.id && Array.isArray(l.forks) && l.forks.length === 5);
  if (bigForks.length) console.log(`   daemon: copy of ${mib(Number(bigForks[0].bytes))}; source frozen p50 ${fmt(median(bigForks.map((l) => Number(l.frozen_ms))))}`);
  console.log(`   p50 ${fmt(median(forkMs))}: ≤ 1 s ${goal(median(forkMs) <= 1000)}`);

  console.log('\n3. create → first command answered, from the snapshot vs from its template');
  console.log(row('warm, from the snapshot', warmSnap, warmTpl));
  console.log(row('warm, from the template (baseline)', warmTpl));
  console.log(row('  of which POST → 201, snapshot', warmSnapCreate, warmTplCreate));
  console.log(row('  of which POST → 201, template', warmTplCreate));
  console.log(row('cold, first from a fresh snapshot', coldSnapMs, [coldTemplateMs]));
  console.log(row('cold, first of the template (baseline)', [coldTemplateMs]));
  console.log(`   warm creates served by the pool: ${2 * WARM - warmMisses} of ${2 * WARM}; cold snapshot creates that booted: ${coldSnapMisses} of ${ROUNDS}; the template's first: ${first.hit ? 'pool hit' : 'booted'}`);
  const warmRatio = median(warmSnap) / median(warmTpl);
  console.log(`   warm ratio ${warmRatio.toFixed(2)}×: ≤ 1.2× ${goal(warmRatio <= 1.2)}`);

  console.log('\n4. rollback (POST /restore → its agent answers again)');
  console.log(row('restore', restoreMs, restartMs));
  console.log(row('  of which POST /restore → 200', restoreRespMs));
  console.log(row('stop + start (baseline)', restartMs));
  console.log(`   p50 ${fmt(median(restoreMs))}: ≤ 500 ms ${goal(median(restoreMs) <= 500)}`);

  const grownSum = grown.reduce((a, b) => a + b, 0);
  const fixedSum = fixed.reduce((a, b) => a + b, 0);
  const forkCost = forkLayerBytes + grownSum;
  const bound = (sourceChanges + 10 * MiB) * 1.05;
  console.log('\n5. host disk used by 10 forks that each wrote 1 MiB');
  console.log(`   fork layer (${forkLayers.length}) in snapshot-layers, du:            ${mib(forkLayerBytes)}`);
  console.log(`   disk images' growth from their 1 MiB, Σ of 10:       ${mib(grownSum)} (each ${grown.map((g) => (g / MiB).toFixed(2)).join(', ')})`);
  console.log(`   = forks' storage:                                    ${mib(forkCost)}`);
  console.log(`   source's changes (du of its snapshot's layer) + 10 MiB: ${mib(sourceChanges + 10 * MiB)}; +5 %: ${mib(bound)}`);
  console.log(`   goal ≤ source + 10 × 1 MiB + 5 %: ${goal(forkCost <= bound)} (${(forkCost / (sourceChanges + 10 * MiB)).toFixed(3)}×)`);
  console.log(`   fixed cost, each disk image before its 1 MiB:         ${mib(median(fixed))} (Σ of 10: ${mib(fixedSum)}); a plain sandbox's image: ${mib(cleanImage)}; the source's: ${mib(srcImage)}`);
  console.log(`   with the fixed cost: ${mib(forkCost + fixedSum)}; whole snapshot-layers store then (with the source's snapshot): ${mib(storeTotal)}`);
  console.log(`   cross-checks over the same steps: du -x of the data dir +${mib(duDelta)}; df of its filesystem +${mib(dfDelta)} (host-wide: anything else writing counts)`);
} finally {
  rmSync(cpDir, { recursive: true, force: true });
  for (const id of [...snapshots]) await api(server, 'DELETE', `/v1/snapshots/${id}`).catch(() => undefined);
  await server.stop();
}
