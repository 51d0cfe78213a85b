// The persistent JavaScript of a code context (bundled to sbx_kernel_js.cjs, run by the image's
// `node` or the agent's own runtime). The same protocol as sbx_kernel.py: cells arrive as JSON
// lines on fd 3, each answered after its output's end marker went to fd 1 and fd 2.
import { writeSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Socket } from 'node:net';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { inspect } from 'node:util';
import vm from 'node:vm';
import { prepareCell } from './transform.js';

interface CellMessage {
  cell: string;
  code: string;
  cwd?: string | null;
  env?: Record<string, string>;
}

const appliedEnv: Record<string, string> = {};
let lastCwd = process.cwd();
let running: { interrupted: boolean; reject: (e: unknown) => void } | null = null;
/** The nonce of the cell that runs now. */
let runningCell: string | null = null;
let n = 0;

/** The sandbox's env for this cell; variables the code set itself stay unless the env names them. */
function applyEnv(env: Record<string, string>): void {
  for (const k of Object.keys(appliedEnv)) {
    if (!(k in env) && process.env[k] === appliedEnv[k]) delete process.env[k];
    delete appliedEnv[k];
  }
  for (const [k, v] of Object.entries(env)) {
    if (process.env[k] !== v) process.env[k] = v;
    appliedEnv[k] = v;
  }
}

/** `require` and `import` resolve from the working directory, as in a script there. */
function localRequire(): NodeJS.Require {
  return createRequire(join(process.cwd(), '__cell__.js'));
}

const g = globalThis as Record<string, unknown>;
g.require = localRequire();
g.__sbxImport = (spec: string) => {
  let target = spec;
  try {
    const path = localRequire().resolve(spec);
    if (path.startsWith('/')) target = pathToFileURL(path).href;
  } catch {
    // left to import() (an ESM-only package, say)
  }
  return import(target);
};

/**
 * The user's part of an error's stack: no frames of this kernel, of Node's internals, or of the
 * line that calls the cell's wrapper (`wrapperLine` of `cell`).
 */
function describe(err: unknown, cell?: string, wrapperLine?: number): string {
  if (!(err instanceof Error) || !err.stack) return `Uncaught ${inspect(err)}`;
  const self = __filename;
  const lines = err.stack
    .split('\n')
    .filter((l) => !l.includes(self) && !l.includes('node:internal') && !l.includes('node:vm') && !/^\s+at new Promise \(<anonymous>\)$/.test(l))
    .filter((l) => !cell || !l.includes(`${cell}:${wrapperLine}:`));
  return lines.join('\n');
}

async function runCell(code: string): Promise<{ exitCode: number; interrupted: boolean }> {
  const filename = `<cell-${++n}>`;
  const prepared = prepareCell(code);
  let script: vm.Script;
  try {
    script = new vm.Script(prepared ?? code, { filename });
  } catch (err) {
    process.stderr.write(`${describe(err)}\n`);
    return { exitCode: 1, interrupted: false };
  }
  const state = { interrupted: false, reject: (_e: unknown) => undefined as void };
  running = state;
  try {
    const ran: unknown = script.runInThisContext({ breakOnSigint: true });
    // Not resolved with the cell's promise itself: an interrupt must still be able to end the wait.
    const value: unknown = await new Promise((res, rej) => {
      state.reject = rej;
      Promise.resolve(ran).then(res, rej);
    });
    if (value !== undefined) result(value);
    return { exitCode: 0, interrupted: false };
  } catch (err) {
    const interrupted = state.interrupted || (err instanceof Error && /interrupted by `?SIGINT/.test(err.message));
    process.stderr.write(interrupted ? 'Interrupted (the cell was stopped by SIGINT)\n' : `${describe(err, filename, code.split('\n').length + 1)}\n`);
    return { exitCode: interrupted ? 130 : 1, interrupted };
  } finally {
    running = null;
  }
}

let resultText: string | undefined;
function result(value: unknown): void {
  resultText = inspect(value, { depth: 4, maxArrayLength: 200, maxStringLength: 100_000 });
}

process.on('SIGINT', () => {
  // Between the synchronous part (breakOnSigint) and the end: the cell stops waiting; what it
  // started goes on in the background, as in a notebook.
  if (running) {
    running.interrupted = true;
    running.reject(new Error('interrupted'));
  }
});
process.on('uncaughtException', (err) => process.stderr.write(`${describe(err)}\n`));
process.on('unhandledRejection', (err) => process.stderr.write(`${describe(err)}\n`));

const ctl = new Socket({ fd: 3, readable: true, writable: true });
let buf = '';
let queue = Promise.resolve();
ctl.on('data', (c: Buffer) => {
  buf += c.toString();
  for (let nl = buf.indexOf('\n'); nl >= 0; nl = buf.indexOf('\n')) {
    const line = buf.slice(0, nl);
    buf = buf.slice(nl + 1);
    const msg = JSON.parse(line) as CellMessage & { interrupt?: string };
    if (msg.interrupt !== undefined) {
      // The cell is waiting (a promise): it stops waiting; what it started goes on.
      if (running && runningCell === msg.interrupt) {
        running.interrupted = true;
        running.reject(new Error('interrupted'));
      }
      continue;
    }
    queue = queue.then(() => handle(msg));
  }
});
ctl.on('end', () => process.exit(0));
ctl.on('error', () => process.exit(0));

async function handle(msg: CellMessage): Promise<void> {
  applyEnv(msg.env ?? {});
  resultText = undefined;
  let outcome = { exitCode: 0, interrupted: false };
  try {
    if (msg.cwd && msg.cwd !== lastCwd) {
      process.chdir(msg.cwd);
      lastCwd = msg.cwd;
      g.require = localRequire();
    }
  } catch (err) {
    process.stderr.write(`${(err as Error).message}\n`);
    outcome = { exitCode: 1, interrupted: false };
  }
  runningCell = msg.cell;
  if (outcome.exitCode === 0) outcome = await runCell(msg.code);
  runningCell = null;
  const marker = `\0sbx-end:${msg.cell}\0`;
  for (const fd of [1, 2]) {
    try {
      writeSync(fd, marker);
    } catch {
      // a closed stream has nothing to end
    }
  }
  ctl.write(`${JSON.stringify({ cell: msg.cell, exit_code: outcome.exitCode, interrupted: outcome.interrupted, result: resultText })}\n`);
}

ctl.write('{"ready": true}\n');
