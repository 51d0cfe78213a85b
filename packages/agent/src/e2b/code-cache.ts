import { isAscii } from 'node:buffer';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Script } from 'node:vm';
import type * as EnvdModule from './entry.js';

/** envd's bundle, beside agent.cjs (build.mjs). */
export const ENVD_BUNDLE = 'envd.cjs';
/**
 * V8's code cache of envd.cjs: its bytecode after loading it and creating the handler, made at
 * build time by the Node that builds (make-code-cache.ts) under the agent's V8 flags. Loading with
 * it skips parsing and compiling most of the 450 KB. V8 rejects it when made by another V8 or under
 * other flags; the bundle is then compiled from source as without it.
 */
export const ENVD_CODE_CACHE = 'envd.cjs.v8cache';

export interface CompiledEnvd {
  script: Script;
  /** 'used', or why not: 'absent' (no cache file), 'rejected' (made by another V8 or flags). */
  cache: 'used' | 'absent' | 'rejected';
  /** Runs the bundle's top level, as CommonJS, and returns its exports. */
  run(): typeof EnvdModule;
}

/**
 * Compiles envd.cjs from `dir` the way Node's CommonJS loader would (the same wrapper), with its
 * code cache when `withCache` and one is there. It requires Node built-ins only (bundle.test.ts).
 */
export function compileEnvd(dir: string, require: (id: string) => unknown, withCache = true): CompiledEnvd {
  const filename = join(dir, ENVD_BUNDLE);
  // esbuild writes ASCII: decoded as Latin-1 it is copied, not decoded from UTF-8 (a few ms here).
  const bytes = readFileSync(filename);
  const source = bytes.toString(isAscii(bytes) ? 'latin1' : 'utf8');
  let cachedData: Buffer | undefined;
  if (withCache) {
    try {
      cachedData = readFileSync(join(dir, ENVD_CODE_CACHE));
    } catch {
      cachedData = undefined;
    }
  }
  const script = new Script(`(function (exports, require, module, __filename, __dirname) {${source}\n})`, { filename, cachedData });
  const cache = cachedData === undefined ? 'absent' : script.cachedDataRejected === true ? 'rejected' : 'used';
  return {
    script,
    cache,
    run() {
      const module = { exports: {} as typeof EnvdModule };
      const wrapper = script.runInThisContext() as (e: unknown, r: unknown, m: unknown, f: string, d: string) => void;
      wrapper.call(module.exports, module.exports, require, module, filename, dir);
      return module.exports;
    },
  };
}
