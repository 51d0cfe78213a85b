import type { Agent, Route, RouteContext } from '../context.js';
import type { LogItem, OutputLog } from '../exec/output-log.js';
import type { ProcessEntry } from '../exec/registry.js';
import { ServiceError } from '../proto.js';

/** Default and largest output a JSON read returns. */
const DEFAULT_READ_BYTES = 4 * 1024 * 1024;
const MAX_READ_BYTES = 16 * 1024 * 1024;
/** What one attach pump reads from the log before it looks at the socket again. */
const PUMP_BYTES = 64 * 1024;
/** Comments keep an idle stream open through the gateway (which cuts bodies silent for long). */
const PING_MS = 15_000;

function entryOf(agent: Agent, id: string): ProcessEntry & { output: OutputLog } {
  const entry = agent.executor.registry.get(id);
  if (!entry) throw new ServiceError('PROCESS_NOT_FOUND', `Process not found: ${id}`, { process_id: id });
  if (!entry.output) {
    throw new ServiceError('INVALID_STATE', `process ${id} ran in the foreground: its output came with its response; only background processes keep theirs`, { process_id: id });
  }
  return entry as ProcessEntry & { output: OutputLog };
}

/** A non-negative integer query parameter, or the default; anything else is a 400 naming it. */
function offsetParam(ctx: RouteContext, name: string, fallback: number, max = Number.MAX_SAFE_INTEGER): number {
  const raw = ctx.url.searchParams.get(name);
  if (raw === null || raw === '') return fallback;
  if (!/^\d{1,16}$/.test(raw) || Number(raw) > max) {
    throw new ServiceError('VALIDATION_ERROR', `${name} must be an integer from 0 to ${max}`, { field: name });
  }
  return Number(raw);
}

function checkSince(log: OutputLog, since: number, id: string): void {
  if (since > log.end) {
    throw new ServiceError('VALIDATION_ERROR', `since ${since} is past the end of the output of ${id} (${log.end}): an offset comes from an earlier read of this process`, {
      field: 'since',
      end_offset: log.end,
    });
  }
}

function wireItem(item: LogItem): Record<string, unknown> {
  return item.kind === 'output' ? { stream: item.stream, offset: item.offset, data: item.data.toString('utf8') } : { offset: item.offset, bytes: item.bytes };
}

function ended(entry: ProcessEntry): boolean {
  return entry.endedAt !== null;
}

/** GET /processes/{id}/output?since=&max_bytes=: what is kept from an offset, and where to go on. */
function readOutput(agent: Agent, ctx: RouteContext, id: string): Record<string, unknown> {
  const entry = entryOf(agent, id);
  const log = entry.output;
  const since = offsetParam(ctx, 'since', 0);
  const maxBytes = offsetParam(ctx, 'max_bytes', DEFAULT_READ_BYTES, MAX_READ_BYTES);
  if (maxBytes === 0) throw new ServiceError('VALIDATION_ERROR', 'max_bytes must be at least 1', { field: 'max_bytes' });
  checkSince(log, since, id);
  const r = log.read(since, maxBytes);
  return {
    process_id: entry.id,
    status: entry.status,
    exit_code: entry.exitCode,
    since,
    next_offset: r.next,
    start_offset: log.start,
    end_offset: log.end,
    lost_bytes: r.lostBytes,
    // Nothing more will come: the process ended and this read reached the end.
    complete: ended(entry) && r.next === log.end,
    chunks: r.items.filter((i) => i.kind === 'output').map(wireItem),
  };
}

/**
 * GET /processes/{id}/attach?since=: server-sent events. What is kept from the offset, then the
 * output as it comes, then `exit`. Each client is a cursor into the log: it writes while its
 * socket takes the bytes and, when the socket is full, waits for it to drain and reads on from the
 * log, so a slow client never slows the process; if the log dropped bytes it had not read, a
 * `lost` event says how many.
 */
function attach(agent: Agent, ctx: RouteContext, id: string): undefined {
  const entry = entryOf(agent, id);
  const log = entry.output;
  const lastEventId = ctx.req.headers['last-event-id'];
  // A browser's EventSource reconnects with the id of the last event it got: its next offset.
  const resume = typeof lastEventId === 'string' && /^\d{1,16}$/.test(lastEventId) ? Number(lastEventId) : 0;
  let cursor = offsetParam(ctx, 'since', resume);
  checkSince(log, cursor, id);

  const res = ctx.res;
  res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' });
  res.flushHeaders();
  let closed = false;
  let waitingForDrain = false;
  let scheduled = false;

  const event = (name: string, data: unknown, eventId?: number) => res.write(`${eventId === undefined ? '' : `id: ${eventId}\n`}event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);
  const pump = () => {
    scheduled = false;
    if (closed || waitingForDrain) return;
    for (;;) {
      const r = log.read(cursor, PUMP_BYTES);
      if (r.items.length === 0) break;
      let full = false;
      for (const item of r.items) full = !event(item.kind === 'output' ? 'output' : 'lost', wireItem(item), item.kind === 'output' ? item.offset + item.data.length : undefined) || full;
      cursor = r.next;
      if (full) {
        waitingForDrain = true;
        res.once('drain', () => {
          waitingForDrain = false;
          pump();
        });
        return;
      }
    }
    if (log.closed && cursor === log.end) {
      event('exit', { status: entry.status, exit_code: entry.exitCode, next_offset: cursor });
      stop();
      res.end();
    }
  };
  // Writes come one pipe read at a time: one pump per turn of the event loop serves them all.
  const unfollow = log.follow(() => {
    if (scheduled || waitingForDrain) return;
    scheduled = true;
    setImmediate(pump);
  });
  const ping = setInterval(() => res.write(': ping\n\n'), PING_MS);
  const stop = () => {
    closed = true;
    unfollow();
    clearInterval(ping);
  };
  res.once('close', stop);
  res.write(': attached\n\n');
  pump();
  return undefined;
}

/** The output of background processes: read from an offset, or attached to and followed live. */
export function processRoutes(agent: Agent): Route[] {
  return [
    {
      method: 'GET',
      path: '/processes/*',
      handler: (ctx) => {
        const m = /^([^/]+)\/(output|attach)$/.exec(ctx.rest);
        if (!m) throw new ServiceError('ROUTE_NOT_FOUND', `no route for GET /processes/${ctx.rest}`);
        return m[2] === 'output' ? readOutput(agent, ctx, m[1]!) : attach(agent, ctx, m[1]!);
      },
    },
  ];
}
