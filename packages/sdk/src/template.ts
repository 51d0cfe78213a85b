import { chunksOf } from './body.js';
import { ApiClient, enc, type CallOptions } from './client.js';
import type { ClientOptions } from './config.js';
import { TemplateBuildError } from './errors.js';
import { bodyError } from './http.js';
import { abortError, scope, sleep } from './signals.js';
import { parseSse } from './sse.js';
import { collectFiles, uploadContext, uploadTemplateFiles } from './template-files.js';
import type { BuildLogEntry, BuildLogsChunk, BuildStatus, TemplateInfo } from './types.js';
import { toBuildLogsChunk, toBuildStatus, toTemplateInfo } from './wire.js';

export type BuildStep =
  | { type: 'from'; image: string }
  | { type: 'apt'; packages: string[] }
  | { type: 'run'; command: string }
  /**
   * `src`: local files or directories (relative to `contextDir`), packed and uploaded by the SDK,
   * copied with Docker's COPY rules; or `file_id`/`file_ids` from `Template.uploadFiles()`.
   */
  | { type: 'copy'; dest: string; src?: string | string[]; file_id?: string; file_ids?: string[] }
  | { type: 'env'; key: string; value: string }
  | { type: 'workdir'; path: string };

export interface TemplateDefinition {
  /** Template name, unique in the organization. */
  alias: string;
  /** vCPUs (default 2). */
  cpu?: number;
  /** Memory, MB (default 2048). */
  memory?: number;
  /** Disk, GB (default 10). */
  diskGB?: number;
  /** The first step must be `from`. */
  steps: BuildStep[];
  /** Rebuild every step, ignoring cached layers. */
  skipCache?: boolean;
}

export interface TemplateOptions extends ClientOptions {
  client?: ApiClient;
}

export interface WaitBuildOptions extends TemplateOptions {
  signal?: AbortSignal;
  /** Each build log line as it is written. */
  onLog?: (entry: BuildLogEntry) => void;
  /** The build's status whenever it changes (progress 0-100, current step). */
  onProgress?: (status: BuildStatus) => void;
  /** Status poll interval, ms (default 1000). */
  pollIntervalMs?: number;
  /** Give up waiting after this many ms (default: no limit). */
  timeoutMs?: number;
}

export interface BuildOptions extends WaitBuildOptions {
  /** Directory that local `copy` sources are relative to (default: the current directory). */
  contextDir?: string;
  /** Return as soon as the build is accepted (default false: wait until it is active or failed). */
  noWait?: boolean;
}

export interface BuildStarted {
  buildId: string;
  templateId: string;
  status: string;
  logsUrl: string;
}

export interface BuildResult extends BuildStarted {
  /** Final status: `active` on success. */
  status: string;
  durationMs: number | null;
  /** The template, once active. */
  template?: TemplateInfo;
}

const SUCCESS = new Set(['active', 'success', 'completed', 'ready']);
const FAILURE = new Set(['failed', 'error', 'cancelled', 'canceled']);
export const isTerminalBuildStatus = (s: string): boolean => SUCCESS.has(s) || FAILURE.has(s);

function clientOf(o: TemplateOptions | undefined): ApiClient {
  return o?.client ?? new ApiClient(o);
}

function guessLevel(line: string): string {
  if (/\b(error|fatal|failed)\b/i.test(line)) return 'error';
  if (/\bwarn(ing)?\b/i.test(line)) return 'warn';
  return 'info';
}

function logEntry(v: unknown): BuildLogEntry {
  const o = v && typeof v === 'object' ? (v as Record<string, unknown>) : {};
  const message = typeof o.message === 'string' ? o.message : typeof v === 'string' ? v : JSON.stringify(v);
  return {
    level: typeof o.level === 'string' ? o.level.toLowerCase() : guessLevel(message),
    message,
    timestamp: typeof o.timestamp === 'string' ? o.timestamp : '',
  };
}

/** Templates: list, inspect, delete, and build custom ones from steps. */
export class Template {
  /** Builds a template and (unless `noWait`) follows it to the end, streaming logs; throws TemplateBuildError if it fails. */
  static async build(definition: TemplateDefinition, options: BuildOptions = {}): Promise<BuildResult> {
    const client = clientOf(options);
    const started = await Template.startBuild(definition, { ...options, client });
    if (options.noWait) return { ...started, durationMs: null };
    return Template.waitForBuild(started.buildId, { ...options, client });
  }

  /** Uploads local copy sources and submits the build; resolves once the service accepted it. */
  static async startBuild(definition: TemplateDefinition, options: Omit<BuildOptions, 'noWait'> = {}): Promise<BuildStarted> {
    const client = clientOf(options);
    const steps = await Template.resolveSteps(definition.steps, client, options);
    const json: Record<string, unknown> = { ...definition, steps };
    const body = await client.http.json<Record<string, unknown>>({
      method: 'POST',
      path: '/v1/templates/build',
      json,
      signal: options.signal,
      what: `build template ${definition.alias}`,
    });
    const buildId = String(body.build_id ?? body.template_id ?? '');
    return {
      buildId,
      templateId: String(body.template_id ?? buildId),
      status: String(body.status ?? 'building'),
      logsUrl: String(body.logs_url ?? `/v1/templates/build/${buildId}/logs`),
    };
  }

  /**
   * Copy steps with local `src` are packed (directory structure, modes and symlinks kept), uploaded,
   * and sent as the service's tarball form of COPY; steps naming uploaded `file_id`s pass through.
   */
  private static async resolveSteps(steps: BuildStep[], client: ApiClient, options: BuildOptions): Promise<Array<BuildStep | Record<string, unknown>>> {
    const out: Array<BuildStep | Record<string, unknown>> = [];
    for (const step of steps ?? []) {
      if (step.type !== 'copy' || step.src === undefined) {
        out.push(step);
        continue;
      }
      const sources = Array.isArray(step.src) ? step.src : [step.src];
      const { filesHash, paths } = await uploadContext(client, options.contextDir ?? process.cwd(), sources, { signal: options.signal });
      out.push({ type: 'COPY', args: [paths.join(','), step.dest], filesHash });
    }
    return out;
  }

  /** Follows a build until it is active or failed. */
  static async waitForBuild(buildId: string, options: WaitBuildOptions = {}): Promise<BuildResult> {
    const client = clientOf(options);
    const s = scope(options.signal, options.timeoutMs);
    const logsAbort = new AbortController();
    const onOuterAbort = (): void => logsAbort.abort(s.signal.reason);
    s.signal.addEventListener('abort', onOuterAbort, { once: true });
    const recent: string[] = [];
    const remember = (e: BuildLogEntry): void => {
      recent.push(e.message);
      if (recent.length > 50) recent.shift();
    };
    const follower = options.onLog
      ? (async () => {
          for await (const e of Template.followLogs(buildId, { client, signal: logsAbort.signal, pollIntervalMs: options.pollIntervalMs })) {
            remember(e);
            options.onLog!(e);
          }
        })().catch((err: unknown) => {
          if (!logsAbort.signal.aborted) throw err;
        })
      : Promise.resolve();
    try {
      let last = '';
      let status: BuildStatus;
      for (;;) {
        status = await Template.buildStatus(buildId, { client, signal: s.signal });
        const key = `${status.status}|${status.progress}|${status.currentStep ?? ''}`;
        if (key !== last) {
          last = key;
          options.onProgress?.(status);
        }
        if (isTerminalBuildStatus(status.status)) break;
        await sleep(options.pollIntervalMs ?? 1000, s.signal);
      }
      // Let the log stream deliver its tail (it ends by itself on `done`), but not forever.
      const grace = setTimeout(() => logsAbort.abort(new Error('build finished')), 5000);
      await follower.finally(() => clearTimeout(grace));
      const result: BuildResult = {
        buildId: status.buildId || buildId,
        templateId: status.templateId || buildId,
        status: status.status,
        logsUrl: `/v1/templates/build/${buildId}/logs`,
        durationMs: status.buildDurationMs,
      };
      if (FAILURE.has(status.status)) {
        if (!options.onLog) {
          const chunk = await Template.logs(buildId, { client, offset: 0, signal: s.signal }).catch(() => undefined);
          if (chunk) recent.push(...chunk.logs.split('\n').filter(Boolean).slice(-50));
        }
        const tail = recent.slice(-20);
        throw new TemplateBuildError(`template build ${buildId} failed: ${status.errorMessage ?? 'see the build logs'}`, {
          code: 'BUILD_FAILED',
          buildId,
          logs: tail,
          body: status,
        });
      }
      result.template = await Template.get(status.templateId || buildId, { client, signal: s.signal }).catch(() => undefined);
      if (!result.template) delete result.template;
      return result;
    } catch (err) {
      logsAbort.abort(err);
      if (s.signal.aborted && !(err instanceof TemplateBuildError)) throw abortError(s.signal.reason, `build ${buildId}`);
      throw err;
    } finally {
      s.signal.removeEventListener('abort', onOuterAbort);
      s.dispose();
    }
  }

  static async buildStatus(buildId: string, options: TemplateOptions & CallOptions = {}): Promise<BuildStatus> {
    const body = await clientOf(options).http.json({
      method: 'GET',
      path: `/v1/templates/build/${enc(buildId)}/status`,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `build status ${buildId}`,
    });
    return toBuildStatus(body);
  }

  /** One chunk of a build's log, from `offset` (JSON form). */
  static async logs(buildId: string, options: TemplateOptions & CallOptions & { offset?: number } = {}): Promise<BuildLogsChunk> {
    const body = await clientOf(options).http.json({
      method: 'GET',
      path: `/v1/templates/build/${enc(buildId)}/logs`,
      query: { offset: options.offset ?? 0 },
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `build logs ${buildId}`,
    });
    return toBuildLogsChunk(body);
  }

  /**
   * A build's log lines from the start, live, ending when the build is over. Uses the SSE stream;
   * if the service answers with JSON instead, or the stream breaks, polls `?offset=` instead.
   */
  static async *followLogs(
    buildId: string,
    options: TemplateOptions & { signal?: AbortSignal; pollIntervalMs?: number } = {},
  ): AsyncGenerator<BuildLogEntry, void, undefined> {
    const client = clientOf(options);
    const path = `/v1/templates/build/${enc(buildId)}/logs`;
    let emitted = 0;
    let firstChunk: BuildLogsChunk | undefined;
    const sent = await client.http.send({ method: 'GET', path, query: { offset: 0 }, accept: 'text/event-stream', signal: options.signal, what: `build logs ${buildId}` }, 'stream');
    try {
      const type = sent.res.headers.get('content-type') ?? '';
      if (type.includes('text/event-stream') && sent.res.body) {
        try {
          for await (const ev of parseSse(chunksOf(sent.res.body as ReadableStream<Uint8Array>))) {
            if (ev.event === 'log') {
              let data: unknown = ev.data;
              try {
                data = JSON.parse(ev.data);
              } catch {
                /* plain text line */
              }
              emitted++;
              yield logEntry(data);
            } else if (ev.event === 'done') {
              return;
            }
          }
        } catch (err) {
          if (sent.signal.aborted) throw bodyError(err, sent);
          // The stream broke; carry on by polling.
        }
      } else {
        firstChunk = toBuildLogsChunk(JSON.parse(await sent.res.text()));
      }
    } finally {
      sent.done();
    }

    let offset = 0;
    let skip = emitted;
    for (;;) {
      const chunk = firstChunk ?? (await Template.logs(buildId, { client, offset, signal: options.signal }));
      firstChunk = undefined;
      for (const line of chunk.logs.split('\n')) {
        if (!line.trim()) continue;
        if (skip > 0) {
          skip--;
          continue;
        }
        yield logEntry(line);
      }
      offset = chunk.offset || offset;
      if (chunk.complete) return;
      // A finished build may still have lines we have not read: ask again at once until none come.
      if (isTerminalBuildStatus(chunk.status)) {
        if (!chunk.logs) return;
        continue;
      }
      await sleep(options.pollIntervalMs ?? 1000, options.signal);
    }
  }

  static async list(options: TemplateOptions & CallOptions & { category?: string; language?: string } = {}): Promise<TemplateInfo[]> {
    const body = await clientOf(options).http.json<{ data?: unknown[] }>({
      method: 'GET',
      path: '/v1/templates',
      query: { category: options.category, language: options.language },
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: 'list templates',
    });
    return (body.data ?? []).map(toTemplateInfo);
  }

  static async get(nameOrId: string, options: TemplateOptions & CallOptions = {}): Promise<TemplateInfo> {
    const body = await clientOf(options).http.json({
      method: 'GET',
      path: `/v1/templates/${enc(nameOrId)}`,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `get template ${nameOrId}`,
    });
    return toTemplateInfo(body);
  }

  /** Deletes a custom template (ConflictError while a live sandbox uses it; PermissionDeniedError for built-ins). */
  static async delete(nameOrId: string, options: TemplateOptions & CallOptions = {}): Promise<{ id: string; status: string }> {
    const body = await clientOf(options).http.json<Record<string, unknown>>({
      method: 'DELETE',
      path: `/v1/templates/${enc(nameOrId)}`,
      signal: options.signal,
      timeoutMs: options.requestTimeoutMs,
      what: `delete template ${nameOrId}`,
    });
    return { id: String(body.id ?? nameOrId), status: String(body.status ?? 'deleted') };
  }

  /** Uploads local files for `copy` steps; returns their `file_id`s. */
  static async uploadFiles(paths: string[], options: TemplateOptions & CallOptions & { contextDir?: string } = {}): Promise<Array<{ path: string; fileId: string }>> {
    const client = clientOf(options);
    const files = [];
    for (const p of paths) files.push(...(await collectFiles(p, options.contextDir ?? process.cwd())));
    return uploadTemplateFiles(client, files, options);
  }
}
