import { readFileSync } from 'node:fs';
import { stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Language } from '../proto.js';
import { which } from './which.js';
import type { PythonZygotes } from './zygote.js';

/** Code up to this size goes in argv; longer code goes through a file (one argv string is capped at 128 KiB). */
const MAX_ARGV_CODE_BYTES = 100 * 1024;

export interface LaunchContext {
  agentDir: string;
  /** Where long code is written for the interpreter to read. */
  tmpDir: string;
  id: string;
  env: Record<string, string>;
  /** Per-execution rich output directory (Python). */
  outDir: string;
  /** Warm Pythons, when enabled. */
  zygotes: PythonZygotes | null;
}

export interface LaunchPlan {
  argv: string[];
  /** Run through this warm Python (sbx-helper zrun), which runs argv cold when it is not there. */
  zygote?: string;
  /** A file holding the code, removed after the run. */
  tempFile?: string;
}

/**
 * How to start JavaScript when the image has no `node`: the agent's own runtime, started the way the
 * agent itself was (`ld.so --library-path LIBS node`: its libraries come with it). Both
 * process.execPath and /proc/self/exe name the loader then, so the command line is the source.
 */
export function agentNodeCommand(cmdline = readCmdline(), script = process.argv[1]): string[] {
  const at = script ? cmdline.indexOf(script) : -1;
  if (at <= 0) return [process.execPath];
  const prefix = cmdline.slice(0, at);
  // Keep the loader and its options up to the node binary; drop node's own flags after it.
  let nodeAt = prefix.length - 1;
  while (nodeAt > 0 && prefix[nodeAt]!.startsWith('-')) nodeAt--;
  return prefix.slice(0, nodeAt + 1);
}

function readCmdline(): string[] {
  try {
    return readFileSync('/proc/self/cmdline', 'utf8').split('\0').filter((a) => a !== '');
  } catch {
    return [];
  }
}

const ESM_SYNTAX = /^\s*(import\s*[\w{*'"]|export\s)/m;

async function codeArg(code: string, ctx: LaunchContext, ext: string): Promise<{ inline: boolean; value: string }> {
  if (Buffer.byteLength(code) <= MAX_ARGV_CODE_BYTES) return { inline: true, value: code };
  const file = join(ctx.tmpDir, `${ctx.id}${ext}`);
  await writeFile(file, code, { mode: 0o600 });
  return { inline: false, value: file };
}

export async function planPython(code: string, ctx: LaunchContext): Promise<LaunchPlan> {
  const found = (await which('python3', ctx.env.PATH)) ?? (await which('python', ctx.env.PATH));
  const python = found ?? 'python3';
  const arg = await codeArg(code, ctx, '.py');
  return {
    argv: [python, join(ctx.agentDir, 'sbx_run.py'), ctx.outDir, arg.inline ? '-c' : '-f', arg.value],
    tempFile: arg.inline ? undefined : arg.value,
    zygote: (found && ctx.zygotes?.socketFor(found, ctx.env)) || undefined,
  };
}

export async function planJavaScript(code: string, ctx: LaunchContext, fallback: string[]): Promise<LaunchPlan> {
  const node = await which('node', ctx.env.PATH);
  const runtime = node ? [node] : fallback;
  const esm = ESM_SYNTAX.test(code);
  const arg = await codeArg(code, ctx, esm ? '.mjs' : '.cjs');
  if (arg.inline) return { argv: [...runtime, ...(esm ? ['--input-type=module'] : []), '-e', code] };
  return { argv: [...runtime, arg.value], tempFile: arg.value };
}

export async function planBash(code: string, ctx: LaunchContext): Promise<LaunchPlan> {
  const shell = (await which('bash', ctx.env.PATH)) ?? '/bin/sh';
  const arg = await codeArg(code, ctx, '.sh');
  if (arg.inline) return { argv: [shell, '-c', code] };
  return { argv: [shell, arg.value], tempFile: arg.value };
}

/** Go snippets often omit the package clause; a program needs one. */
export function goSource(code: string): string {
  return /^\s*package\s+\w+/m.test(code) ? code : `package main\n\n${code}`;
}

const GO_ENV_KEYS = ['GOOS', 'GOARCH', 'GOAMD64', 'CGO_ENABLED', 'GOFLAGS', 'GOEXPERIMENT', 'GOROOT', 'GOPATH', 'GO111MODULE'];

/** Identifies the toolchain and the settings that change what it builds (part of the cache key). */
export async function goToolchainKey(goPath: string, env: Record<string, string>): Promise<string> {
  let id = goPath;
  try {
    const st = await stat(goPath);
    id += `:${st.size}:${st.mtimeMs}`;
  } catch {
    // keyed by path only
  }
  return [id, ...GO_ENV_KEYS.map((k) => `${k}=${env[k] ?? ''}`)].join('\n');
}

/** The env `go build` needs on any image: no toolchain downloads, a writable build cache. */
export function goBuildEnv(env: Record<string, string>, stateDir: string): Record<string, string> {
  const out = { ...env };
  out.GOTOOLCHAIN ??= 'local';
  if (!out.GOCACHE && !out.HOME && !out.XDG_CACHE_HOME) out.GOCACHE = join(stateDir, 'cache', 'go-build');
  return out;
}

export type Planner = (code: string, ctx: LaunchContext) => Promise<LaunchPlan>;

export function plannerFor(language: Exclude<Language, 'go'>, nodeFallback: string[]): Planner {
  if (language === 'python') return planPython;
  if (language === 'javascript') return (code, ctx) => planJavaScript(code, ctx, nodeFallback);
  return planBash;
}
