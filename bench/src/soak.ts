// bench/soak: a week of churn in minutes. Create → one command → delete cycles against a daemon of
// its own (mixed templates, half with internet access), and at every window a count of what the
// daemon holds on the host once at rest: anything beyond its warm pool and spare disks is a leak.
// Exits non-zero on a leak, a failed cycle, or RSS / open fds grown more than 10 % since warm-up.
// Usage (root, after npm run build): node bench/dist/soak.js [CYCLES=10000] [CONCURRENCY=8] [WINDOW=1000]
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import {
  CHURN_ENV,
  CHURN_TEMPLATES,
  checkpoint,
  DaemonInspector,
  drift,
  INSPECT_ENV,
  judge,
  runCycles,
  scopeOf,
  warmPoolCapacity,
  type Checkpoint,
  type CycleResult,
} from '../../e2e/dist/churn.js';
import { startServer, type TestServer } from '../../e2e/dist/harness.js';
import { OBJECT_KINDS } from '../../packages/server/dist/testing/host-objects.js';
import { fmt, row, summary } from './stats.js';

const CYCLES = Number(process.argv[2] ?? 10_000);
const CONCURRENCY = Number(process.argv[3] ?? 8);
const WINDOW = Number(process.argv[4] ?? 1000);
/** RSS and open fds may not grow more than this after the first window (warm-up). */
const MAX_DRIFT = 0.1;
/** A window where more cycles than this fail means the daemon is broken, not leaking: stop there. */
const MAX_FAILING = 0.1;

const SHORT: Record<string, string> = {
  containers: 'ctr',
  mounts: 'mnt',
  loops: 'loop',
  netns: 'netns',
  veths: 'veth',
  cgroups: 'cgrp',
  idRanges: 'ids',
  dataDirEntries: 'dirs',
  otherFiles: 'files',
  gatewayPorts: 'ports',
};

/** The store's main file (its WAL stays up to ~4 MiB between checkpoints, and would hide the trend). */
function dbKiB(server: TestServer): number {
  try {
    return Math.round(statSync(join(server.dataDir, 'sandboxd.db')).size / 1024);
  } catch {
    return 0;
  }
}

interface Window {
  label: string;
  cp: Checkpoint;
  results: CycleResult[];
  seconds: number;
  leaks: string[];
  dbKiB: number;
  /** The daemon's live JS heap after a forced GC (taken after the RSS, which the GC may lower). */
  heapKiB: number;
}

const pct = (x: number) => `${x >= 0 ? '+' : ''}${(x * 100).toFixed(1)} %`;

function header(): string {
  return [
    'window'.padEnd(8),
    'cycles'.padStart(7),
    'per s'.padStart(6),
    'create p50'.padStart(11),
    'p99'.padStart(10),
    'fail'.padStart(5),
    'RSS MiB'.padStart(8),
    'heap'.padStart(6),
    'fds'.padStart(4),
    'thr'.padStart(4),
    'kids'.padStart(5),
    ...OBJECT_KINDS.map((k) => SHORT[k]!.padStart(k === 'cgroups' ? 5 : 6)),
    'db KiB'.padStart(7),
    'leaked'.padStart(7),
  ].join(' ');
}

function line(w: Window): string {
  const s = summary(w.results.map((r) => r.createMs));
  const v = w.cp.objects;
  return [
    w.label.padEnd(8),
    String(w.cp.cycles).padStart(7),
    (w.results.length ? (w.results.length / w.seconds).toFixed(1) : '').padStart(6),
    (w.results.length ? fmt(s.p50) : '').padStart(11),
    (w.results.length ? fmt(s.p99) : '').padStart(10),
    String(w.results.filter((r) => r.error).length).padStart(5),
    (w.cp.facts.rssKiB / 1024).toFixed(1).padStart(8),
    (w.heapKiB / 1024).toFixed(2).padStart(6),
    String(w.cp.facts.fds).padStart(4),
    String(w.cp.facts.threads).padStart(4),
    String(w.cp.facts.children).padStart(5),
    ...OBJECT_KINDS.map((k) => String(v[k].length).padStart(k === 'cgroups' ? 5 : 6)),
    String(w.dbKiB).padStart(7),
    String(w.leaks.length).padStart(7),
  ].join(' ');
}

async function main(): Promise<number> {
  const t0 = performance.now();
  const server = await startServer({ env: { ...CHURN_ENV, ...INSPECT_ENV } });
  let inspector: DaemonInspector | undefined;
  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    inspector?.close();
    await server.stop();
  };
  // Ctrl-C still deletes every sandbox and removes the daemon's data dir.
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      process.stderr.write(`\n${sig}: stopping the daemon and removing its sandboxes\n`);
      void stop().finally(() => process.exit(130));
    });
  }
  try {
    const scope = scopeOf(server);
    inspector = await DaemonInspector.connect(server);
    const capacity = warmPoolCapacity(server);
    console.log(
      `bench/soak on ${new Date().toISOString()}: ${CYCLES} cycles of create → /commands/run → delete, ${CONCURRENCY} at a time, ` +
        `templates ${CHURN_TEMPLATES.join(' + ')} alternating, half with internet access; a count at rest every ${WINDOW} cycles ` +
        `(daemon pid ${scope.pid}, data dir ${scope.dataDir}, warm pool up to ${capacity} sandboxes)`,
    );
    console.log(
      `columns: objects of this daemon on the host (${OBJECT_KINDS.map((k) => `${SHORT[k]}=${k}`).join(', ')}); ` +
        `heap = its live JS heap after a forced GC (MiB); kids = its child processes; all at rest`,
    );
    const start = await checkpoint(server, scope, 0);
    const windows: Window[] = [
      { label: 'start', cp: start, results: [], seconds: 0, leaks: judge(start, start, capacity).leaks, dbKiB: dbKiB(server), heapKiB: await inspector.heapAfterGcKiB() },
    ];
    console.log(header());
    console.log(line(windows[0]!));
    let warm: Checkpoint | undefined;
    let done = 0;
    let n = 0;
    while (done < CYCLES) {
      const count = Math.min(WINDOW, CYCLES - done);
      const tw = performance.now();
      const results = await runCycles(server, done, count, CONCURRENCY);
      const seconds = (performance.now() - tw) / 1000;
      done += count;
      const cp = await checkpoint(server, scope, done);
      // Files and ports are judged against the count after warm-up once there is one (the first
      // window makes what a daemon makes once, on its first sandboxes).
      const verdict = judge(cp, warm ?? start, capacity);
      const w: Window = { label: `${++n}`, cp, results, seconds, leaks: verdict.leaks, dbKiB: dbKiB(server), heapKiB: await inspector.heapAfterGcKiB() };
      windows.push(w);
      console.log(line(w));
      for (const l of verdict.leaks.slice(0, 10)) console.log(`  leak after ${done} cycles: ${l}`);
      const failed = results.filter((r) => r.error);
      for (const r of failed.slice(0, 5)) console.log(`  cycle ${r.i} (${r.template}, internet ${r.internet}) failed: ${r.error}`);
      warm ??= cp;
      if (failed.length > MAX_FAILING * count) {
        console.log(`  ${failed.length} of ${count} cycles failed: stopping (see ${server.logFile})`);
        break;
      }
    }

    const all = windows.flatMap((w) => w.results);
    const last = windows.at(-1)!;
    const after = windows.slice(2);
    console.log(`\nbench/soak summary: ${all.length} cycles in ${((performance.now() - t0) / 1000 / 60).toFixed(1)} min (with the counts at rest)`);
    console.log(row('create (all cycles)', all.map((r) => r.createMs)));
    for (const t of CHURN_TEMPLATES) {
      for (const internet of [false, true]) {
        console.log(row(`create ${t}${internet ? ' + internet' : ''}`, all.filter((r) => r.template === t && r.internet === internet).map((r) => r.createMs)));
      }
    }
    console.log(row('whole cycle', all.map((r) => r.cycleMs)));
    const failed = all.filter((r) => r.error).length;
    const leaked = windows.filter((w) => w.leaks.length);
    const firstLeak = leaked[0];
    console.log(`failed cycles: ${failed}`);
    console.log(
      `leaks: ${leaked.length ? `in ${leaked.length} of ${windows.length} counts, first after ${firstLeak!.cp.cycles} cycles (${firstLeak!.leaks.length} objects)` : 'none'}` +
        ` (final count: ${last.leaks.length})`,
    );
    let drifted = false;
    const warmWindow = windows[1];
    if (warmWindow && after.length) {
      const perCycle = ((last.heapKiB - warmWindow.heapKiB) * 1024) / (last.cp.cycles - warmWindow.cp.cycles);
      console.log(
        `daemon JS heap after GC ${(warmWindow.heapKiB / 1024).toFixed(2)} → ${(last.heapKiB / 1024).toFixed(2)} MiB since warm-up: ` +
          `${perCycle >= 0 ? '+' : ''}${perCycle.toFixed(0)} bytes per cycle (not judged: a bounded cache grows too; see docs/performance.md)`,
      );
    }
    if (warm && after.length) {
      const d = drift(last.cp, warm);
      const worst = after.map((w) => drift(w.cp, warm!));
      drifted = d.rss > MAX_DRIFT || d.fds > MAX_DRIFT;
      console.log(
        `daemon RSS ${(warm.facts.rssKiB / 1024).toFixed(1)} → ${(last.cp.facts.rssKiB / 1024).toFixed(1)} MiB (${pct(d.rss)}, highest ${pct(Math.max(...worst.map((x) => x.rss)))}), ` +
          `fds ${warm.facts.fds} → ${last.cp.facts.fds} (${pct(d.fds)}) since warm-up (after ${warm.cycles} cycles); limit ${pct(MAX_DRIFT)}`,
      );
    } else {
      console.log('daemon RSS / fds drift: n/a (needs more than one window: warm-up is the first)');
    }
    console.log(`store: ${windows[0]!.dbKiB} → ${last.dbKiB} KiB (deleted sandboxes stay as tombstones for SANDBOXD_TOMBSTONE_SECONDS, a day by default)`);
    const ok = failed === 0 && last.leaks.length === 0 && leaked.length === 0 && !drifted && done === CYCLES;
    console.log(ok ? 'soak: PASS' : 'soak: FAIL');
    return ok ? 0 : 1;
  } finally {
    await stop();
  }
}

process.exitCode = await main();
