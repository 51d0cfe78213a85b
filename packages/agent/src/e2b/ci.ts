import { stat } from 'node:fs/promises';
import { basename } from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import type { Agent, Route, RouteContext } from '../context.js';
import { validateEnvVars } from '../env/store.js';
import { CONTEXT_LANGUAGES, isContextLanguage, type CodeContext } from '../exec/contexts.js';
import type { ExecOptions } from '../exec/executor.js';
import { regularFile } from '../exec/rich.js';
import { resolvePath } from '../files/paths.js';
import { optionalString, requiredString } from '../http/validate.js';
import { normalizeLanguage, ServiceError, type ExecuteResult, type Language } from '../proto.js';
import { MAX_TIMEOUT_S } from '../routes/execute.js';

/**
 * E2B's code interpreter (its port 49999, which the gateway sends here under /e2b/ci): `POST
 * /execute` answers an NDJSON stream of E2B's messages (stdout, stderr, result, error,
 * number_of_executions, end_of_execution), and `/contexts` creates, lists, restarts and removes
 * contexts. Both are our executor's contexts and kernels; nothing here runs code itself.
 * Languages: python and javascript (js) keep state in contexts; bash runs each cell in a fresh
 * shell; R and TypeScript are not in sandboxd's templates.
 */

export const CI_PREFIX = '/e2b/ci';
/** A rich output file larger than this is left out of the result (rich.ts inlines up to the same). */
const MAX_RICH_BYTES = 8 * 1024 * 1024;
/** A client that reads slower than its cell prints: output past this much waiting for it is dropped (said once). */
const MAX_PENDING_BYTES = 8 * 1024 * 1024;
/**
 * A silent cell still sends a line this often: the gateway cuts a response that moves no byte for
 * its idle timeout (5 min by default). The clients skip a message type they do not know.
 */
export const KEEPALIVE_MS = 30_000;
/** Of a failed cell's stderr, the traceback kept in the error message. */
const MAX_TRACEBACK_CHARS = 64 * 1024;

/** E2B's `error` message. */
export interface CiError {
  name: string;
  value: string;
  traceback: string;
}

/** A context as E2B's client reads it. */
interface CiContext {
  id: string;
  language: string;
  cwd: string;
}

const SUPPORTED = 'python, javascript (js), bash';

function ciLanguage(input: string | undefined): Language {
  const language = normalizeLanguage(input);
  if (!language) {
    throw new ServiceError('INVALID_LANGUAGE', `unsupported language ${JSON.stringify(input)}: this sandbox runs ${SUPPORTED}`, { field: 'language' });
  }
  return language;
}

function toCiContext(c: CodeContext): CiContext {
  return { id: c.id, language: c.language, cwd: c.cwd };
}

/**
 * E2B's error from a failed cell's stderr: the last traceback (Python: from "Traceback (most
 * recent call last):", or a SyntaxError's `File` block; JavaScript: the stack), its exception's
 * name and value from the line that states it.
 */
export function cellError(language: Language, stderr: string, exitCode: number): CiError {
  const text = stderr.replace(/\s+$/, '');
  const cut = (s: string) => (s.length > MAX_TRACEBACK_CHARS ? s.slice(s.length - MAX_TRACEBACK_CHARS) : s);
  const fallback = (name: string): CiError => ({ name, value: `exit code ${exitCode}`, traceback: cut(text) });
  if (language === 'python') {
    if (!text) return { name: 'SystemExit', value: String(exitCode), traceback: '' };
    let start = text.lastIndexOf('Traceback (most recent call last):');
    if (start < 0) {
      const file = text.lastIndexOf('  File "');
      start = file < 0 ? -1 : text.lastIndexOf('\n', file) + 1;
    }
    const block = start < 0 ? text : text.slice(start);
    const last = block.slice(block.lastIndexOf('\n') + 1);
    const m = /^([A-Za-z_][\w.]*)(?:: ?(.*))?$/.exec(last);
    return m ? { name: m[1]!, value: m[2] ?? '', traceback: cut(block) } : fallback('Error');
  }
  if (language === 'javascript') {
    const lines = text.split('\n');
    for (let i = lines.length - 1; i >= 0; i--) {
      const line = lines[i]!;
      const uncaught = /^Uncaught (.*)$/.exec(line);
      if (uncaught) return { name: 'Error', value: uncaught[1]!, traceback: cut(text) };
      const m = /^([A-Za-z_$][\w$]*(?:Error|Exception)|Error)(?:: (.*))?$/.exec(line);
      if (m) return { name: m[1]!, value: m[2] ?? '', traceback: cut(text) };
    }
    return fallback('Error');
  }
  return fallback('Error');
}

/** The rich forms of one output file, as E2B's result fields; undefined when it is not one or cannot be read. */
async function richField(path: string, ext: string): Promise<Record<string, unknown> | undefined> {
  const f = await regularFile(path, MAX_RICH_BYTES, true);
  if (!f?.data) return undefined;
  if (ext === 'png') return { png: f.data.toString('base64') };
  const text = f.data.toString('utf8');
  if (ext === 'json') {
    try {
      return { json: JSON.parse(text) as unknown };
    } catch {
      return undefined;
    }
  }
  if (ext === 'md') return { markdown: text };
  if (ext === 'svg' || ext === 'html') return { [ext]: text };
  return undefined;
}

/**
 * E2B's `chart` of a figure: the data the bootstrap (sbx_charts.py) read from it, left beside its
 * `NNN-figure.png` as `NNN-figure.chart` (not one of /execute's rich outputs); undefined when
 * there is none or it is not a JSON object.
 */
async function figureChart(pngPath: string): Promise<Record<string, unknown> | undefined> {
  const f = await regularFile(`${pngPath.slice(0, -'png'.length)}chart`, MAX_RICH_BYTES, true);
  if (!f?.data) return undefined;
  try {
    const chart = JSON.parse(f.data.toString('utf8')) as unknown;
    return chart !== null && typeof chart === 'object' && !Array.isArray(chart) ? (chart as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * E2B's result messages of a finished cell: each displayed output (a figure, display()) its own,
 * in the order they came, then the main result: the last expression's text, with its rich forms
 * (a DataFrame's HTML) that the bootstrap wrote as `NNN-main.ext`. A figure's result carries its
 * `png` and, when its data could be read, its `chart`.
 */
export async function cellResults(result: ExecuteResult): Promise<Record<string, unknown>[]> {
  const out: Record<string, unknown>[] = [];
  const main: Record<string, unknown> = {};
  for (const o of result.rich_outputs ?? []) {
    const name = basename(o.path);
    const ext = name.slice(name.lastIndexOf('.') + 1);
    const fields = await richField(o.path, ext);
    if (!fields) continue;
    if (/^\d+-figure\.png$/.test(name)) {
      const chart = await figureChart(o.path);
      if (chart) fields.chart = chart;
    }
    if (/^\d+-main\./.test(name)) Object.assign(main, fields);
    else out.push({ type: 'result', ...fields, is_main_result: false });
  }
  if (result.result !== undefined || Object.keys(main).length) {
    out.push({ type: 'result', ...(result.result !== undefined ? { text: result.result } : {}), ...main, is_main_result: true });
  }
  return out;
}

/** The NDJSON answer of one execution: lines written as they come, bounded for a slow reader. */
class Lines {
  private dropped = false;
  constructor(private readonly ctx: RouteContext) {}

  send(msg: Record<string, unknown>, droppable = false): void {
    const res = this.ctx.res;
    if (res.destroyed || res.writableEnded) return;
    if (droppable && res.writableLength > MAX_PENDING_BYTES) {
      if (!this.dropped) {
        this.dropped = true;
        res.write(`${JSON.stringify({ type: 'stderr', text: '[sandboxd] output dropped: the client reads slower than the cell writes\n', timestamp: new Date().toISOString() })}\n`);
      }
      return;
    }
    res.write(`${JSON.stringify(msg)}\n`);
  }
}

async function execute(agent: Agent, ctx: RouteContext, counts: Map<string, number>, keepaliveMs: number): Promise<undefined> {
  const body = await ctx.body();
  const code = requiredString(body, 'code', { allowEmpty: true });
  const contextId = optionalString(body, 'context_id');
  const languageInput = optionalString(body, 'language');
  // A context runs its own language; a cell that names another is refused by the executor.
  const context = contextId !== undefined ? agent.executor.contexts.get(contextId) : undefined;
  const language = context && languageInput === undefined ? context.language : ciLanguage(languageInput);
  if (context && context.language !== language) {
    throw new ServiceError('VALIDATION_ERROR', `context ${context.id} runs ${context.language}, not ${language}`, { field: 'language', context_id: context.id });
  }
  const env = body.env_vars === undefined || body.env_vars === null ? undefined : validateEnvVars(body.env_vars, 'env_vars');
  const gaveUp = new AbortController();
  const onClose = () => {
    if (!ctx.res.writableFinished) gaveUp.abort();
  };
  ctx.res.once('close', onClose);
  // Headers at once: the client's request timeout runs until they come, and a cell may be silent for long.
  ctx.res.writeHead(200, { 'content-type': 'application/x-ndjson', 'cache-control': 'no-store' });
  ctx.res.flushHeaders();
  const lines = new Lines(ctx);
  const keepalive = setInterval(() => lines.send({ type: 'keepalive' }, true), keepaliveMs);
  const decoders = { stdout: new StringDecoder('utf8'), stderr: new StringDecoder('utf8') };
  const chunk = (stream: 'stdout' | 'stderr') => (c: Buffer) => {
    const text = decoders[stream].write(c);
    if (text) lines.send({ type: stream, text, timestamp: new Date().toISOString() }, true);
  };
  const opts: ExecOptions = {
    language,
    code,
    timeoutSec: MAX_TIMEOUT_S,
    cwd: undefined,
    env,
    cache: false,
    rich: true,
    contextId,
    stream: { onStdout: chunk('stdout'), onStderr: chunk('stderr') },
    signal: gaveUp.signal,
  };
  try {
    const result = await agent.executor.execute(opts);
    for (const stream of ['stdout', 'stderr'] as const) {
      const rest = decoders[stream].end();
      if (rest) lines.send({ type: stream, text: rest, timestamp: new Date().toISOString() });
    }
    for (const r of await cellResults(result)) lines.send(r);
    if (result.timed_out) {
      lines.send({ type: 'error', name: 'TimeoutError', value: `the cell ran longer than ${MAX_TIMEOUT_S} seconds`, traceback: '' });
    } else if (result.kernel_restarted) {
      lines.send({ type: 'error', name: 'KernelRestarted', value: 'the kernel died and was restarted: variables and imports of earlier cells are gone', traceback: result.stderr.slice(-MAX_TRACEBACK_CHARS) });
    } else if (result.exit_code !== 0 && !result.killed) {
      lines.send({ type: 'error', ...cellError(language, result.stderr, result.exit_code) });
    }
    const key = result.context_id ?? `fresh:${language}`;
    const n = (counts.get(key) ?? 0) + 1;
    counts.set(key, n);
    lines.send({ type: 'number_of_executions', execution_count: n });
  } catch (err) {
    // Headers are out: the failure is the stream's last message.
    const e = err instanceof ServiceError ? err : undefined;
    lines.send({ type: 'error', name: e?.code ?? 'Error', value: e?.message ?? (err instanceof Error ? err.message : String(err)), traceback: '' });
  } finally {
    clearInterval(keepalive);
    ctx.res.off('close', onClose);
  }
  lines.send({ type: 'end_of_execution' });
  ctx.res.end();
  return undefined;
}

/** The routes of E2B's code interpreter, under /e2b/ci. */
export function ciRoutes(agent: Agent, opts: { keepaliveMs?: number } = {}): Route[] {
  const keepaliveMs = opts.keepaliveMs ?? KEEPALIVE_MS;
  const contexts = agent.executor.contexts;
  /** Cells run per context (E2B's execution_count), and per language for fresh processes. */
  const counts = new Map<string, number>();
  const contextId = (rest: string, suffix = ''): string => {
    const m = new RegExp(`^([A-Za-z0-9_-]{1,128})${suffix}$`).exec(rest);
    if (!m) throw new ServiceError('CONTEXT_NOT_FOUND', `Context not found: ${rest.slice(0, 128)}`, { context_id: rest.slice(0, 128) });
    return m[1]!;
  };
  return [
    { method: 'GET', path: `${CI_PREFIX}/health`, handler: () => ({ status: 'ok' }) },
    { method: 'POST', path: `${CI_PREFIX}/execute`, handler: (ctx) => execute(agent, ctx, counts, keepaliveMs) },
    {
      method: 'POST',
      path: `${CI_PREFIX}/contexts`,
      handler: async (ctx): Promise<CiContext> => {
        const body = await ctx.body();
        const input = optionalString(body, 'language');
        const language = ciLanguage(input);
        if (!isContextLanguage(language)) {
          throw new ServiceError('INVALID_LANGUAGE', `contexts run ${CONTEXT_LANGUAGES.join(', ')}, not ${JSON.stringify(input)} (a ${language} cell runs without a context, in a fresh process)`, {
            field: 'language',
          });
        }
        const dir = optionalString(body, 'cwd');
        const cwd = dir === undefined ? undefined : resolvePath(dir, agent.config.workspaceDir, 'cwd');
        if (cwd !== undefined) {
          const st = await stat(cwd).catch(() => null);
          if (!st) throw new ServiceError('INVALID_PATH', `working directory does not exist: ${cwd}`, { path: cwd, field: 'cwd' });
          if (!st.isDirectory()) throw new ServiceError('NOT_A_DIRECTORY', `working directory is not a directory: ${cwd}`, { path: cwd, field: 'cwd' });
        }
        return toCiContext(contexts.create({ language, cwd }));
      },
    },
    { method: 'GET', path: `${CI_PREFIX}/contexts`, handler: (): CiContext[] => contexts.list().map(toCiContext) },
    {
      method: 'POST',
      path: `${CI_PREFIX}/contexts/*`,
      handler: (ctx) => {
        const id = contextId(ctx.rest, '/restart');
        const c = contexts.restart(id);
        counts.delete(c.id);
        return toCiContext(c);
      },
    },
    {
      method: 'DELETE',
      path: `${CI_PREFIX}/contexts/*`,
      handler: (ctx) => {
        const id = contextId(ctx.rest);
        contexts.delete(id);
        counts.delete(id);
        return { id, deleted: true };
      },
    },
  ];
}
