import { parentPort } from 'node:worker_threads';
import { mapIdRange, TooManyEntries } from './shift.js';

// mapIdRangeOffThread's worker: walks one tree per message, and posts its result or its error back.
parentPort!.on('message', (w: { id: number; dir: string; from: number; to: number; count: number; maxEntries: number }) => {
  try {
    parentPort!.postMessage({ id: w.id, ok: true, result: mapIdRange(w.dir, w.from, w.to, w.count, { maxEntries: w.maxEntries }) });
  } catch (err) {
    parentPort!.postMessage({ id: w.id, ok: false, error: String(err), ...(err instanceof TooManyEntries ? { tooMany: err.max } : {}) });
  }
});
