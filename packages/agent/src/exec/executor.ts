import { rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { AgentConfig } from '../config.js';
import { ProgramCache, type CompileRun } from '../cache/programs.js';
import { ResultCache } from '../cache/results.js';
import { effectiveEnv, type EnvStore } from '../env/store.js';
import type { AgentStats } from '../metrics/stats.js';
import { ServiceError, type BackgroundStarted, type CommandResult, type ExecuteResult, type Language } from '../proto.js';
import { goBuildEnv, goSource, goToolchainKey, plannerFor, type LaunchPlan } from './languages.js';
import { newProcessId, ProcessRegistry, type ProcessEntry } from './registry.js';
import { OutputLog } from './output-log.js';
import { CappedOutput } from './capture.js';
import { collectRichOutputs, discard, OutputDirs, type RichFields } from './rich.js';
import { RunningProcess, type RunOutcome } from './runner.js';
import { plainArgv } from './shell.js';
import { which } from './which.js';
import type { PythonZygotes } from './zygote.js';
import { Contexts, isContextLanguage, type CodeContext } from './contexts.js';

export interface StreamHooks {
  onStdout(chunk: Buffer): void;
  onStderr(chunk: Buffer): void;
}

export interface ExecOptions {
  language: Language;
  code: string;
  timeoutSec: number;
  cwd: string | undefined;
  env: Record<string, string> | undefined;
  /** Opt-in result cache. */
  cache: boolean;
  /** Keep rich output files and list them (/execute/rich). */
  rich: boolean;
  name?: string;
  stream?: StreamHooks;
  /** Aborting kills the execution (e.g. its WebSocket closed). */
  signal?: AbortSignal;
  /** Written to the program's stdin, which is then closed (absent: /dev/null). */
  stdin?: Buffer;
  /** The code context to run in (absent: the language's default context, when it has contexts). */
  contextId?: string;
  /** A fresh process that keeps no state, as before contexts. */
  isolated?: boolean;
}

export interface CommandOptions {
  command: string;
  args: string[] | undefined;
  timeoutSec: number;
  cwd: string | undefined;
  env: Record<string, string> | undefined;
  name?: string;
  stdin?: Buffer;
}

export interface ExecutorDeps {
  config: AgentConfig;
  envStore: EnvStore;
  stats: AgentStats;
  helperPath: string | null;
  nodeFallback: string[];
  /** Warm Pythons (null: every Python run starts an interpreter). */
  zygotes: PythonZygotes | null;
}

type Timing = { deadline: number; timeoutSec: number };

/** Runs code and commands inside the sandbox: the rules of /execute*, /commands/* and process kills. */
export class Executor {
  readonly registry: ProcessRegistry;
  readonly programs: ProgramCache;
  readonly results = new ResultCache<ExecuteResult>(100, 4 * 1024 * 1024, 3600_000);
  private readonly outputs = new OutputDirs(100);
  private readonly tmpDir: string;
  private readonly outputsDir: string;
  readonly contexts: Contexts;

  constructor(private readonly deps: ExecutorDeps) {
    // Finished processes keep their output logs up to the size of four full ones.
    this.registry = new ProcessRegistry(Math.max(8 * 1024 * 1024, 8 * deps.config.processOutputRingBytes));
    this.contexts = new Contexts(deps.config.agentDir, deps.config.workspaceDir, () => this.env(undefined), deps.nodeFallback);
    this.programs = new ProgramCache(join(deps.config.stateDir, 'cache', 'programs'));
    this.tmpDir = join(deps.config.stateDir, 'tmp');
    this.outputsDir = join(deps.config.stateDir, 'outputs');
  }

  /**
   * The context an execution runs in, or null for a fresh process: `isolated`, the opt-in result
   * cache (a cached answer cannot depend on state) and languages without contexts run fresh.
   */
  contextFor(o: ExecOptions): CodeContext | null {
    if (o.contextId !== undefined) {
      const ctx = this.contexts.get(o.contextId);
      if (o.isolated) throw new ServiceError('VALIDATION_ERROR', 'isolated and context_id exclude each other', { field: 'isolated' });
      if (o.stdin && ctx.language === 'javascript') {
        throw new ServiceError('VALIDATION_ERROR', 'a JavaScript context gives no stdin to its cells; run without context_id (a fresh process) to read stdin', { field: 'stdin' });
      }
      if (ctx.language !== o.language) {
        throw new ServiceError('VALIDATION_ERROR', `context ${ctx.id} runs ${ctx.language}, not ${o.language}`, { field: 'language', context_id: ctx.id });
      }
      return ctx;
    }
    if (o.isolated || o.cache || !isContextLanguage(o.language)) return null;
    // A JavaScript kernel has no stdin to give a cell: input is for a program of its own.
    if (o.stdin && o.language === 'javascript') return null;
    return this.contexts.defaultFor(o.language);
  }

  async execute(o: ExecOptions): Promise<ExecuteResult> {
    const context = this.contextFor(o);
    if (context) {
      const entry = this.newEntry('execute', false, o.language, o.name ?? o.language);
      const onAbort = () => this.kill(entry.id);
      if (o.signal?.aborted) onAbort();
      o.signal?.addEventListener('abort', onAbort, { once: true });
      return this.runInContext(entry, o, context).finally(() => o.signal?.removeEventListener('abort', onAbort));
    }
    const env = this.env(o.env);
    const cwd = o.cwd ?? this.deps.config.workspaceDir;
    const cacheKey = o.cache ? ResultCache.key({ language: o.language, code: o.code, env, cwd, stdin: o.stdin?.toString('base64') }) : null;
    if (cacheKey) {
      const hit = this.results.get(cacheKey);
      if (hit) return { ...hit, cached: true, timestamp: new Date().toISOString() };
    }
    const entry = this.newEntry('execute', false, o.language, o.name ?? o.language);
    const onAbort = () => this.kill(entry.id);
    if (o.signal?.aborted) onAbort();
    o.signal?.addEventListener('abort', onAbort, { once: true });
    const result = await this.runCode(entry, o, env, cwd).finally(() => o.signal?.removeEventListener('abort', onAbort));
    if (cacheKey && !result.timed_out) {
      this.results.set(cacheKey, result, result.stdout.length + result.stderr.length + (result.png?.length ?? 0) + 512);
    }
    return result;
  }

  /** Starts code in the background; `onDone` gets its result, or the error that kept it from running. */
  startExecute(o: ExecOptions, onDone?: (entry: ProcessEntry, result: ExecuteResult | null, err?: unknown) => void): BackgroundStarted {
    const env = this.env(o.env);
    const cwd = o.cwd ?? this.deps.config.workspaceDir;
    const context = this.contextFor(o);
    const entry = this.newEntry('execute', true, o.language, o.name ?? `${o.language} execution`);
    // Its result goes nowhere (its record reads the output log), unless a callback takes it whole.
    if (!onDone) entry.captureBytes = 0;
    void (context ? this.runInContext(entry, o, context) : this.runCode(entry, o, env, cwd)).then(
      (result) => onDone?.(entry, result),
      (err: unknown) => {
        this.failEntry(entry, err);
        onDone?.(entry, null, err);
      },
    );
    return started(entry);
  }

  async command(o: CommandOptions): Promise<CommandResult> {
    const entry = this.newEntry('command', false, 'shell', o.name ?? o.command);
    return this.runCommand(entry, o);
  }

  startCommand(o: CommandOptions): BackgroundStarted {
    const entry = this.newEntry('command', true, 'shell', o.name ?? [o.command, ...(o.args ?? [])].join(' '));
    entry.captureBytes = 0;
    void this.runCommand(entry, o).catch((err: unknown) => this.failEntry(entry, err));
    return started(entry);
  }

  /** Kills a process and everything it started. Undefined when the id is unknown. */
  kill(id: string): ProcessEntry | undefined {
    const entry = this.registry.get(id);
    if (!entry) return undefined;
    if (entry.status === 'running') {
      entry.status = 'killed';
      entry.proc?.kill('killed');
    }
    return entry;
  }

  private env(requestEnv: Record<string, string> | undefined): Record<string, string> {
    return effectiveEnv(this.deps.config.baseEnv, this.deps.envStore.all(), requestEnv);
  }

  private newEntry(kind: 'execute' | 'command', background: boolean, language: string, name: string): ProcessEntry {
    const entry: ProcessEntry = {
      id: newProcessId(),
      name: name.length > 200 ? `${name.slice(0, 197)}...` : name,
      kind,
      background,
      language,
      startedAt: new Date(),
      endedAt: null,
      status: 'running',
      exitCode: null,
      pid: null,
      proc: null,
    };
    if (background) entry.output = new OutputLog(this.deps.config.processOutputRingBytes);
    this.registry.add(entry);
    return entry;
  }

  private failEntry(entry: ProcessEntry, err: unknown): void {
    if (entry.endedAt) return;
    const message = err instanceof Error ? err.message : String(err);
    entry.output?.write('stderr', Buffer.from(`${message}\n`));
    this.registry.finish(entry, 'failed', -1, { stdout: '', stderr: message, truncated: false });
  }

  /** Spawns one phase (compile or run) of an entry, honouring a kill that came in between. */
  private async spawn(
    entry: ProcessEntry,
    argv: string[],
    cwd: string,
    env: Record<string, string>,
    t: Timing,
    stdin: Buffer | undefined,
    stream?: StreamHooks,
    zygoteSocket?: string,
  ): Promise<RunOutcome> {
    let proc: RunningProcess;
    try {
      proc = new RunningProcess(
        {
          argv,
          stdin,
          zygoteSocket,
          cwd,
          env,
          timeoutMs: Math.max(1, t.deadline - performance.now()),
          capBytes: entry.captureBytes ?? this.deps.config.outputCapBytes,
          ...liveOutput(entry, stream),
        },
        this.deps.helperPath,
      );
    } catch (err) {
      // Node throws (rather than emits) the spawn errors that are the request's, not the program's.
      if ((err as NodeJS.ErrnoException).code === 'E2BIG') {
        throw new ServiceError('VALIDATION_ERROR', 'the command line and environment are too long for the kernel (E2BIG); put long input in a file or in stdin');
      }
      throw err;
    }
    entry.proc = proc;
    entry.pid = proc.pid;
    if (entry.status === 'killed') proc.kill('killed');
    const outcome = await proc.done;
    if (outcome.spawnError) await this.explainSpawnError(outcome, cwd, argv[0]!);
    return outcome;
  }

  /** A missing working directory is the caller's mistake (400); a missing program is a normal result. */
  private async explainSpawnError(outcome: RunOutcome, cwd: string, program: string): Promise<void> {
    const err = outcome.spawnError!;
    const st = await stat(cwd).catch(() => null);
    if (!st) throw new ServiceError('INVALID_PATH', `working directory does not exist: ${cwd}`, { path: cwd });
    if (!st.isDirectory()) throw new ServiceError('NOT_A_DIRECTORY', `working directory is not a directory: ${cwd}`, { path: cwd });
    const text = err.code === 'ENOENT' ? `${program}: command not found\n` : `${program}: ${err.message}\n`;
    outcome.stderr.push(Buffer.from(text));
  }

  private async runCode(entry: ProcessEntry, o: ExecOptions, env: Record<string, string>, cwd: string): Promise<ExecuteResult> {
    const startedMs = performance.now();
    const t: Timing = { deadline: startedMs + o.timeoutSec * 1000, timeoutSec: o.timeoutSec };
    const outDir = join(this.outputsDir, entry.id);
    // Output that is followed (streamed, or kept while a background run goes) is wanted as it is printed.
    const runEnv = (o.stream || entry.output) && o.language === 'python' ? { ...env, PYTHONUNBUFFERED: '1' } : env;
    let plan: LaunchPlan | { outcome: RunOutcome };
    try {
      const ctx = { agentDir: this.deps.config.agentDir, tmpDir: this.tmpDir, id: entry.id, env, outDir, zygotes: this.deps.zygotes };
      plan = o.language === 'go' ? await this.planGo(entry, o.code, env, t) : await plannerFor(o.language, this.deps.nodeFallback)(o.code, ctx);
    } catch (err) {
      this.failEntry(entry, err);
      throw err;
    }
    let outcome: RunOutcome;
    try {
      outcome = 'outcome' in plan ? plan.outcome : await this.spawn(entry, plan.argv, cwd, runEnv, t, o.stdin, o.stream, plan.zygote);
    } catch (err) {
      this.failEntry(entry, err);
      throw err;
    } finally {
      if ('tempFile' in plan && plan.tempFile) void rm(plan.tempFile, { force: true });
    }
    let rich: RichFields = { rich_outputs: [] };
    if (o.language === 'python') {
      rich = await collectRichOutputs(outDir);
      if (rich.rich_outputs.length > 0 && o.rich) this.outputs.remember(outDir);
      else if (rich.rich_outputs.length > 0 || rich.result !== undefined) void discard(outDir);
    }
    const base = this.finish(entry, outcome, startedMs, t);
    const { rich_outputs, ...inline } = rich;
    const result: ExecuteResult = { ...base, ...inline, language: o.language, execution_id: entry.id };
    if (o.rich) result.rich_outputs = rich_outputs;
    return result;
  }

  /** One cell in a context's kernel; its rich output is collected as a fresh run's is. */
  private async runInContext(entry: ProcessEntry, o: ExecOptions, context: CodeContext): Promise<ExecuteResult> {
    const startedMs = performance.now();
    const t: Timing = { deadline: startedMs + o.timeoutSec * 1000, timeoutSec: o.timeoutSec };
    const outDir = join(this.outputsDir, entry.id);
    const env = effectiveEnv(this.deps.config.baseEnv, { ...this.deps.envStore.all(), ...context.env }, o.env);
    const cwd = o.cwd ?? context.cwd;
    // A fresh process fails to start in a missing directory (400); a kernel would only say so in stderr.
    const st = await stat(cwd).catch(() => null);
    if (!st || !st.isDirectory()) {
      const err = st
        ? new ServiceError('NOT_A_DIRECTORY', `working directory is not a directory: ${cwd}`, { path: cwd })
        : new ServiceError('INVALID_PATH', `working directory does not exist: ${cwd}`, { path: cwd });
      this.failEntry(entry, err);
      throw err;
    }
    const cell = context.kernel.run({
      code: o.code,
      outDir,
      cwd,
      env,
      startEnv: effectiveEnv(this.deps.config.baseEnv, { ...this.deps.envStore.all(), ...context.env }, undefined),
      stdin: o.stdin,
      deadline: t.deadline,
      capBytes: entry.captureBytes ?? this.deps.config.outputCapBytes,
      ...liveOutput(entry, o.stream),
    });
    entry.proc = cell;
    entry.pid = cell.pid;
    if (entry.status === 'killed') cell.kill('killed');
    const outcome = await cell.done;
    entry.pid ??= cell.pid;
    if (outcome.kernelRestarted) entry.output?.write('stderr', Buffer.from(`[sandboxd] the kernel was restarted: ${outcome.restartWhy ?? 'it died'}\n`));
    const rich = await collectRichOutputs(outDir);
    if (rich.rich_outputs.length > 0 && o.rich) this.outputs.remember(outDir);
    else if (rich.rich_outputs.length > 0 || rich.result !== undefined) void discard(outDir);
    const base = this.finish(entry, outcome, startedMs, t);
    const { rich_outputs, ...inline } = rich;
    const result: ExecuteResult = { ...base, ...inline, language: o.language, execution_id: entry.id, context_id: context.id };
    if (outcome.result !== undefined) result.result = outcome.result;
    if (outcome.kernelRestarted) {
      // Said after the cell's own output (and past its cap): the one line that explains the rest.
      result.kernel_restarted = true;
      const why = outcome.restartWhy ?? 'it died';
      result.stderr += `${result.stderr && !result.stderr.endsWith('\n') ? '\n' : ''}[sandboxd] the kernel was restarted: ${why}; variables, imports and the working directory of earlier executions are gone\n`;
    }
    if (o.rich) result.rich_outputs = rich_outputs;
    return result;
  }

  private async runCommand(entry: ProcessEntry, o: CommandOptions): Promise<CommandResult> {
    const startedMs = performance.now();
    const t: Timing = { deadline: startedMs + o.timeoutSec * 1000, timeoutSec: o.timeoutSec };
    const argv = o.args ? [o.command, ...o.args] : (plainArgv(o.command) ?? ['/bin/sh', '-c', o.command]);
    const cwd = o.cwd ?? this.deps.config.workspaceDir;
    let outcome: RunOutcome;
    try {
      outcome = await this.spawn(entry, argv, cwd, this.env(o.env), t, o.stdin);
    } catch (err) {
      this.failEntry(entry, err);
      throw err;
    }
    const base = this.finish(entry, outcome, startedMs, t);
    return { ...base, command: o.args ? [o.command, ...o.args].join(' ') : o.command, pid: entry.pid };
  }

  /** Compiles through the program cache; a failed compile is the execution's result. */
  private async planGo(entry: ProcessEntry, code: string, env: Record<string, string>, t: Timing): Promise<LaunchPlan | { outcome: RunOutcome }> {
    const go = await which('go', env.PATH);
    if (!go) return { argv: ['go'] }; // exec fails with "go: command not found", exit 127
    const source = goSource(code);
    const key = ProgramCache.key([await goToolchainKey(go, env), source]);
    const buildEnv = goBuildEnv(env, this.deps.config.stateDir);
    const mine: { outcome?: RunOutcome } = {};
    const compiled = await this.programs.getOrCompile(key, source, async (dir): Promise<CompileRun> => {
      // A compile's output is its result (and other requests' for the same source): always captured.
      const capture = entry.captureBytes;
      entry.captureBytes = undefined;
      const r = await this.spawn(entry, [go, 'build', '-o', 'prog', 'main.go'], dir, buildEnv, t, undefined).finally(() => (entry.captureBytes = capture));
      mine.outcome = r;
      return { stdout: r.stdout.text(), stderr: r.stderr.text(), exitCode: r.exitCode, timedOut: r.reason !== 'exited', output: 'prog' };
    });
    if (compiled.ok) return { argv: [compiled.binary] };
    if (mine.outcome) return { outcome: mine.outcome };
    // Another request's compile of the same source failed at the same time: its output is ours too.
    const stdout = new CappedOutput(this.deps.config.outputCapBytes);
    const stderr = new CappedOutput(this.deps.config.outputCapBytes);
    stdout.push(Buffer.from(compiled.stdout));
    stderr.push(Buffer.from(compiled.stderr));
    return { outcome: { exitCode: compiled.exitCode || 1, reason: compiled.timedOut ? 'timeout' : 'exited', stdout, stderr, durationMs: 0 } };
  }

  private finish(entry: ProcessEntry, outcome: RunOutcome, startedMs: number, t: Timing) {
    const timedOut = outcome.reason === 'timeout';
    const killed = outcome.reason === 'killed' || entry.status === 'killed';
    let stderr = outcome.stderr.text();
    if (timedOut) {
      stderr += `${stderr && !stderr.endsWith('\n') ? '\n' : ''}Execution timed out after ${t.timeoutSec} seconds\n`;
      entry.output?.write('stderr', Buffer.from(`Execution timed out after ${t.timeoutSec} seconds\n`));
    }
    const stdout = outcome.stdout.text();
    const truncated = outcome.stdout.truncated || outcome.stderr.truncated;
    const exitCode = timedOut ? 124 : outcome.exitCode;
    const status = killed ? 'killed' : timedOut ? 'timeout' : exitCode === 0 ? 'completed' : 'failed';
    const durationMs = performance.now() - startedMs;
    this.registry.finish(entry, status, exitCode, { stdout, stderr, truncated });
    this.deps.stats.recordExecution(durationMs, status === 'completed');
    const base = {
      success: status === 'completed',
      stdout,
      stderr,
      exit_code: exitCode,
      execution_time: Math.round(durationMs) / 1000,
      timed_out: timedOut,
      timestamp: new Date().toISOString(),
      ...(truncated ? { truncated: true } : {}),
      ...(killed ? { killed: true } : {}),
    };
    return base;
  }
}

/** The hooks a process's output goes through: into its output log (background), then to a stream. */
function liveOutput(entry: ProcessEntry, stream: StreamHooks | undefined): { onStdout?: (c: Buffer) => void; onStderr?: (c: Buffer) => void } {
  const log = entry.output;
  if (!log) return { onStdout: stream?.onStdout, onStderr: stream?.onStderr };
  return {
    onStdout: (c) => {
      log.write('stdout', c);
      stream?.onStdout(c);
    },
    onStderr: (c) => {
      log.write('stderr', c);
      stream?.onStderr(c);
    },
  };
}

function started(entry: ProcessEntry): BackgroundStarted {
  const at = entry.startedAt.toISOString();
  return {
    process_id: entry.id,
    execution_id: entry.id,
    name: entry.name,
    status: 'running',
    started_at: at,
    start_time: at,
    pid: entry.pid,
    message: 'started in the background',
  };
}
