// How a node sends a snapshot's layer to control (POST /node/v1/sandboxes/:id/layer): the tar is the
// body, and these headers carry its digest and length and what the copy counted.
import type { ExportStats } from './types.js';
import { SNAPSHOT_MAX_ENTRIES } from './verbs/export-layer.js';

export const LAYER_DIGEST_HEADER = 'x-sandboxd-layer-digest';
export const LAYER_BYTES_HEADER = 'x-sandboxd-layer-bytes';
export const EXPORT_STATS_HEADER = 'x-sandboxd-export';


/** What a node says its copy counted: four finite numbers ≥ 0 (entries within the copy's limit), or undefined. */
export function parseExportStats(header: string | null): ExportStats | undefined {
  if (!header || header.length > 1000) return undefined;
  let v: Record<string, unknown>;
  try {
    v = JSON.parse(header) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  if (!v || typeof v !== 'object') return undefined;
  const n = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) && x >= 0 && x <= Number.MAX_SAFE_INTEGER ? x : undefined);
  const [bytes, allocated, entries, frozenMs] = [n(v.bytes), n(v.allocated), n(v.entries), n(v.frozenMs)];
  if (bytes === undefined || allocated === undefined || entries === undefined || frozenMs === undefined || entries > SNAPSHOT_MAX_ENTRIES) return undefined;
  if (v.names === undefined) return { bytes, allocated, entries, frozenMs };
  const names = n(v.names);
  if (names === undefined || !Number.isSafeInteger(names) || names < entries || names > SNAPSHOT_MAX_ENTRIES) return undefined;
  return { bytes, allocated, entries, frozenMs, names };
}
