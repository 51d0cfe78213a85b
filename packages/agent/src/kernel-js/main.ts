// The persistent JavaScript of a code context (bundled to sbx_kernel_js.cjs, run by the image's
// `node` or the agent's own runtime). The same protocol as sbx_kernel.py: cells arrive as JSON
// lines on fd 3, each answered after its output's end marker went to fd 1 and fd 2.
//
// Cells share this process's globals, so everything the kernel itself needs is taken now, before
// any cell runs: a cell that declares `process`, `JSON` or `require` of its own breaks only itself.
import { writeSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Socket } from 'node:net';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { inspect } from 'node:util';
import vm from 'node:vm';
import { prepareCell } from './transform.js';

const proc = process;
const env = process.env;
const chdir = process.chdir.bind(process);
const cwdNow = process.cwd.bind(process);
const exit = process.exit.bind(process);
const onSignal = process.on.bind(process);
const toJson = JSON.stringify;
const fromJson = JSON.parse;
const self = __filename;

interface CellMessage {
  cell: string;
  code: string;
  cwd?: string | null;
  env?: Record<string, string>;
}

const appliedEnv: Record<string, string> = {};
let lastCwd = cwdNow();
let running: { interrupted: boolean; reject: (e: unknown) => void } | null = null;
/** The nonce of the cell that runs now. */
let runningCell: string | null = null;
let n = 0;

function say(fd: 1 | 2, text: string): void {
  try {
    writeSync(fd, text);
  } catch {
    // a closed stream has nothing to say
  }
}

/** The sandbox's env for this cell; variables the code set itself stay unless the env names them. */
function applyEnv(next: Record<string, string>): void {
  for (const k of Object.keys(appliedEnv)) {
    if (!(k in next) && env[k] === appliedEnv[k]) delete env[k];
    delete appliedEnv[k];
  }
  for (const [k, v] of Object.entries(next)) {
    if (env[k] !== v) env[k] = v;
    appliedEnv[k] = v;
  }
}

/** `require` and `import` resolve from the working directory, as in a script there. */
function localRequire(): NodeJS.Require {
  return createRequire(join(cwdNow(), '__cell__.js'));
}

const g = globalThis as Record<string, unknown>;
g.require = localRequire();
const sbxImport = (spec: string) => {
  let target = spec;
  try {
    const path = localRequire().resolve(spec);
    if (path.startsWith('/')) target = pathToFileURL(path).href;
  } catch {
    // left to import() (an ESM-only package, say)
  }
  return import(target);
};
Object.defineProperty(g, '__sbxImport', { value: sbxImport, writable: false, enumerable: false, configurable: false });

/**
 * The user's part of an error's stack: no frames of this kernel, of Node's internals, or of the
 * line that calls the cell's wrapper (`wrapperLine` of `cell`). Never throws.
 */
function describe(err: unknown, cell?: string, wrapperLine?: number): string {
  try {
    if (!(err instanceof Error) || typeof err.stack !== 'string') return `Uncaught ${inspect(err)}`;
    return err.stack
      .split('\n')
      .filter((l) => !l.includes(self) && !l.includes('node:internal') && !l.includes('node:vm') && !/^\s+at new Promise \(<anonymous>\)$/.test(l))
      .filter((l) => !cell || !l.includes(`${cell}:${wrapperLine}:`))
      .join('\n');
  } catch {
    return 'Uncaught exception (it could not be shown)';
  }
}

function isInterrupt(err: unknown): boolean {
  try {
    return err instanceof Error && /interrupted by `?SIGINT/.test(String(err.message));
  } catch {
    return false;
  }
}

let resultText: string | undefined;

async function runCell(code: string): Promise<{ exitCode: number; interrupted: boolean }> {
  const filename = `<cell-${++n}>`;
  const prepared = prepareCell(code);
  let script: vm.Script;
  try {
    script = new vm.Script(prepared ?? code, { filename });
  } catch (err) {
    say(2, `${describe(err)}\n`);
    return { exitCode: 1, interrupted: false };
  }
  const state = { interrupted: false, reject: (_e: unknown) => undefined as void };
  running = state;
  try {
    const ran: unknown = script.runInThisContext({ breakOnSigint: true });
    // Not resolved with the cell's promise itself: an interrupt must still be able to end the wait.
    const boxed: unknown = await new Promise((res, rej) => {
      state.reject = rej;
      Promise.resolve(ran).then(res, rej);
    });
    // The cell returns its last value in a box, so that a promise it ends with is not awaited.
    const value = prepared !== null && Array.isArray(boxed) ? boxed[0] : boxed;
    if (value !== undefined) resultText = inspect(value, { depth: 4, maxArrayLength: 200, maxStringLength: 100_000 });
    return { exitCode: 0, interrupted: false };
  } catch (err) {
    const interrupted = state.interrupted || isInterrupt(err);
    say(2, interrupted ? 'Interrupted (the cell was stopped by SIGINT)\n' : `${describe(err, filename, code.split('\n').length + 1)}\n`);
    return { exitCode: interrupted ? 130 : 1, interrupted };
  } finally {
    running = null;
  }
}

function interruptRunning(): void {
  if (running) {
    running.interrupted = true;
    running.reject(new Error('interrupted'));
  }
}

// Between the synchronous part (breakOnSigint) and the end: the cell stops waiting; what it
// started goes on in the background, as in a notebook.
onSignal('SIGINT', interruptRunning);
onSignal('uncaughtException', (err: unknown) => say(2, `${describe(err)}\n`));
onSignal('unhandledRejection', (err: unknown) => say(2, `${describe(err)}\n`));

const ctl = new Socket({ fd: 3, readable: true, writable: true });
ctl.setEncoding('utf8');
let buf = '';
let queue = Promise.resolve();
ctl.on('data', (chunk: string) => {
  buf += chunk;
  for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
    const line = buf.slice(0, nl);
    buf = buf.slice(nl + 1);
    let msg: (CellMessage & { interrupt?: string }) | null = null;
    try {
      msg = fromJson(line) as CellMessage & { interrupt?: string };
    } catch {
      continue;
    }
    if (!msg || typeof msg !== 'object') continue;
    if (msg.interrupt !== undefined) {
      // The cell is waiting (a promise): it stops waiting; what it started goes on.
      if (runningCell === msg.interrupt) interruptRunning();
      continue;
    }
    const m = msg;
    queue = queue.then(() => handle(m)).catch(() => undefined);
  }
});
ctl.on('end', () => exit(0));
ctl.on('error', () => exit(0));

async function handle(msg: CellMessage): Promise<void> {
  resultText = undefined;
  let outcome = { exitCode: 0, interrupted: false };
  runningCell = msg.cell;
  try {
    applyEnv(msg.env ?? {});
    if (msg.cwd && msg.cwd !== lastCwd) {
      chdir(msg.cwd);
      lastCwd = msg.cwd;
      g.require = localRequire();
    }
    outcome = await runCell(String(msg.code));
  } catch (err) {
    say(2, `${err instanceof Error ? err.message : 'the cell could not run'}\n`);
    outcome = { exitCode: 1, interrupted: false };
  } finally {
    runningCell = null;
    // Always: the end markers and the answer, whatever the cell did.
    const marker = `\0sbx-end:${String(msg.cell)}\0`;
    say(1, marker);
    say(2, marker);
    ctl.write(`${toJson({ cell: msg.cell, exit_code: outcome.exitCode, interrupted: outcome.interrupted, result: resultText })}\n`);
  }
}

void proc;
ctl.write('{"ready": true}\n');
