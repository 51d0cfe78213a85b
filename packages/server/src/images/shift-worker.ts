import { parentPort, workerData } from 'node:worker_threads';
import { mapIdRange, TooManyEntries } from './shift.js';

// mapIdRangeOffThread's worker: one walk, its result or its error posted back.
const w = workerData as { dir: string; from: number; to: number; count: number; maxEntries: number };
try {
  parentPort!.postMessage({ ok: true, result: mapIdRange(w.dir, w.from, w.to, w.count, { maxEntries: w.maxEntries }) });
} catch (err) {
  parentPort!.postMessage({ ok: false, error: String(err), ...(err instanceof TooManyEntries ? { tooMany: err.max } : {}) });
}
