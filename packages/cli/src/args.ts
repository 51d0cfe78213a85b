/** Pure helpers for reading command-line values. Each throws UsageError (exit 2) on bad input. */

export class UsageError extends Error {
  constructor(
    message: string,
    /** The command whose usage to show, e.g. `exec` or `template build`. */
    readonly command?: string,
  ) {
    super(message);
    this.name = 'UsageError';
  }
}

/** `K=V` pairs into an object; the value may contain `=` and be empty. */
export function parseKeyValues(pairs: readonly string[] | undefined, what = '--env'): Record<string, string> {
  const out: Record<string, string> = {};
  for (const p of pairs ?? []) {
    const i = p.indexOf('=');
    if (i <= 0) throw new UsageError(`${what} expects KEY=VALUE, got ${JSON.stringify(p)}`);
    const key = p.slice(0, i);
    if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) throw new UsageError(`${what}: ${JSON.stringify(key)} is not a valid variable name`);
    out[key] = p.slice(i + 1);
  }
  return out;
}

/** Seconds from `90`, `90s`, `15m`, `2h`, `1d`. */
export function parseDuration(value: string, what = '--timeout'): number {
  const m = /^(\d+)\s*(s|m|h|d)?$/i.exec(value.trim());
  if (!m) throw new UsageError(`${what} expects a duration like 300, 90s, 15m or 2h, got ${JSON.stringify(value)}`);
  const n = Number(m[1]) * ({ s: 1, m: 60, h: 3600, d: 86400 } as const)[(m[2]?.toLowerCase() ?? 's') as 's' | 'm' | 'h' | 'd'];
  if (n <= 0) throw new UsageError(`${what} must be more than 0`);
  return n;
}

export function parsePositiveInt(value: string, what: string): number {
  if (!/^\d+$/.test(value.trim()) || Number(value) <= 0) throw new UsageError(`${what} expects a positive whole number, got ${JSON.stringify(value)}`);
  return Number(value);
}

export type CpEndpoint = { kind: 'local'; path: string } | { kind: 'remote'; sandboxId: string; path: string } | { kind: 'stdio' };

/**
 * `ID:/path` is a path in a sandbox; `-` is stdin/stdout; anything else is local. A local path that
 * contains `:` can be written `./name:with:colons`.
 */
export function parseCpEndpoint(arg: string): CpEndpoint {
  if (arg === '-') return { kind: 'stdio' };
  const m = /^([A-Za-z0-9][A-Za-z0-9_-]*):(.*)$/.exec(arg);
  if (m) {
    const path = m[2] ?? '';
    if (!path) throw new UsageError(`${arg}: give the path inside the sandbox after the colon, e.g. ${m[1]}:/workspace/file`, 'cp');
    return { kind: 'remote', sandboxId: m[1]!, path };
  }
  return { kind: 'local', path: arg };
}

const EXTENSIONS: Record<string, string> = {
  py: 'python',
  js: 'javascript',
  mjs: 'javascript',
  cjs: 'javascript',
  sh: 'bash',
  bash: 'bash',
  go: 'go',
};

/** The language of a code file by its extension, or undefined. */
export function languageFromFile(file: string): string | undefined {
  const m = /\.([A-Za-z0-9]+)$/.exec(file);
  return m ? EXTENSIONS[m[1]!.toLowerCase()] : undefined;
}

/** Splits argv at the first `--`: what comes after is passed through untouched. */
export function splitAtDoubleDash(argv: readonly string[]): { before: string[]; after: string[] | undefined } {
  const i = argv.indexOf('--');
  if (i === -1) return { before: [...argv], after: undefined };
  return { before: argv.slice(0, i), after: argv.slice(i + 1) };
}

/** Exit status for a command's exit code: 0-255 as is; a timeout as 124 (like `timeout`); anything else 1. */
export function exitStatusFor(exitCode: number, timedOut: boolean): number {
  if (timedOut) return 124;
  if (Number.isInteger(exitCode) && exitCode >= 0 && exitCode <= 255) return exitCode;
  return 1;
}
