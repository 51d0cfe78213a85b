import {
  AuthenticationError,
  ConnectionError,
  InvalidStateError,
  NotFoundError,
  PermissionDeniedError,
  RateLimitError,
  SandboxdError,
  SandboxExpiredError,
  TemplateBuildError,
  TimeoutError,
} from '@sandboxd/sdk';
import { UsageError } from './args.js';

/** Where the CLI writes; a real process or a test's buffers. */
export interface Io {
  stdout: NodeJS.WritableStream & { isTTY?: boolean; columns?: number; rows?: number };
  stderr: NodeJS.WritableStream & { isTTY?: boolean };
  stdin: NodeJS.ReadableStream & { isTTY?: boolean };
  env: Record<string, string | undefined>;
}

/** Aligned columns; the last column is not padded. */
export function table(headers: string[], rows: string[][]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: string[]): string =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(headers), ...rows.map(line)].join('\n') + '\n';
}

/** `key: value` lines, keys aligned. */
export function keyValues(pairs: Array<[string, string]>): string {
  const w = Math.max(...pairs.map(([k]) => k.length));
  return pairs.map(([k, v]) => `${(k + ':').padEnd(w + 1)} ${v}`).join('\n') + '\n';
}

/** `5s ago`, `3m ago`, `in 2h`; '-' for none. */
export function relativeTime(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return '-';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return iso;
  const d = Math.round((t - now) / 1000);
  const a = Math.abs(d);
  const s = a < 60 ? `${a}s` : a < 3600 ? `${Math.floor(a / 60)}m` : a < 86400 ? `${Math.floor(a / 3600)}h` : `${Math.floor(a / 86400)}d`;
  return d >= 0 ? `in ${s}` : `${s} ago`;
}

export function bytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

export function json(value: unknown): string {
  return JSON.stringify(value, null, 2) + '\n';
}

/** What to suggest for an error, if anything useful. */
export function hintFor(err: unknown, ctx: { baseUrl: string; hasApiKey: boolean }): string | undefined {
  if (err instanceof ConnectionError) {
    if (ctx.baseUrl && err.message.includes(ctx.baseUrl)) return `Is sandboxd running at ${ctx.baseUrl}? Set SANDBOXD_API_URL or pass --api-url.`;
    return 'The connection to the sandbox was lost; check it with `sbx get ID` and try again.';
  }
  if (err instanceof AuthenticationError) {
    return ctx.hasApiKey ? 'Check the API key (SANDBOXD_API_KEY or --api-key).' : 'No API key set: export SANDBOXD_API_KEY=<key> or pass --api-key.';
  }
  if (err instanceof PermissionDeniedError) return 'The API key lacks the scope for this, or the resource belongs to another organization.';
  if (err instanceof SandboxExpiredError) return 'The sandbox reached its timeout and was deleted.';
  if (err instanceof InvalidStateError) {
    if (err.code === 'SANDBOX_PAUSED') return 'The sandbox is paused: run `sbx resume ID` first.';
    if (err.code === 'SANDBOX_STOPPED') return 'The sandbox is stopped: run `sbx start ID` first.';
  }
  if (err instanceof NotFoundError) {
    if (err.code === 'NOT_FOUND') return 'List sandboxes with `sbx ls`.';
    if (err.code === 'TEMPLATE_NOT_FOUND') return 'List templates with `sbx template ls`.';
    if (err.code === 'SNAPSHOT_NOT_FOUND') return 'List snapshots with `sbx snapshot ls`.';
    if (err.code === 'VOLUME_NOT_FOUND') return 'List volumes with `sbx volume ls`.';
  }
  if (err instanceof RateLimitError && err.retryAfter !== undefined) return `Try again in ${err.retryAfter} s.`;
  if (err instanceof SandboxdError && err.code === 'ORG_QUOTA_EXCEEDED' && (err.body as { limit?: unknown } | undefined)?.limit === 'max_snapshot_storage_mb') {
    return "The organization's snapshots fill its storage quota: delete some (`sbx snapshot ls`, `sbx snapshot rm`), or ask the operator to raise the limit.";
  }
  if (err instanceof SandboxdError && err.code === 'ORG_QUOTA_EXCEEDED') {
    return "The organization's sandboxes hold its quota: stop or delete some (`sbx ls`), or ask the operator to raise the limit.";
  }
  if (err instanceof SandboxdError && err.code === 'LIMIT_EXCEEDED') return "Ask for less (a smaller template or timeout), or ask the operator to raise the organization's limit.";
  if (err instanceof TimeoutError) return 'Raise the limit with --timeout, or check that the sandbox is running.';
  return undefined;
}

/** Prints an error; returns the exit status (2 for usage errors, 1 otherwise). */
export function reportError(io: Io, err: unknown, ctx: { baseUrl: string; hasApiKey: boolean; json: boolean }): number {
  if (err instanceof UsageError) {
    if (ctx.json) io.stderr.write(JSON.stringify({ error: { code: 'USAGE', message: err.message } }) + '\n');
    else io.stderr.write(`sbx: ${err.message}\nRun 'sbx ${err.command ? err.command + ' ' : ''}--help' for usage.\n`);
    return 2;
  }
  const hint = hintFor(err, ctx);
  if (err instanceof SandboxdError) {
    if (ctx.json) {
      io.stderr.write(JSON.stringify({ error: { ...err.toJSON(), hint } }) + '\n');
    } else {
      const meta = [err.code, err.status ? `HTTP ${err.status}` : undefined, err.requestId ? `request ${err.requestId}` : undefined].filter(Boolean).join(', ');
      io.stderr.write(`sbx: error: ${err.message} (${meta})\n`);
      if (err instanceof TemplateBuildError && err.logs.length) {
        io.stderr.write(`last build log lines:\n${err.logs.map((l) => `  ${l}`).join('\n')}\n`);
      }
      if (hint) io.stderr.write(`hint: ${hint}\n`);
    }
    return 1;
  }
  const message = err instanceof Error ? err.message : String(err);
  if (ctx.json) io.stderr.write(JSON.stringify({ error: { code: 'ERROR', message } }) + '\n');
  else io.stderr.write(`sbx: error: ${message}\n`);
  return 1;
}
