import { ServiceError } from '../proto.js';

/** Field readers for JSON bodies: unknown fields are ignored, wrong types are 400 naming the field. */

type Body = Record<string, unknown>;

function invalid(field: string, what: string): ServiceError {
  return new ServiceError('VALIDATION_ERROR', `${field} must be ${what}`, { field });
}

export interface StringOptions {
  allowEmpty?: boolean;
  /**
   * Strings end up in argv, paths and the environment, which are C strings: a NUL byte there makes
   * spawn or the filesystem throw. Only data that never becomes one (file content, stdin) may hold NUL.
   */
  allowNul?: boolean;
}

/** A 400 for a NUL byte in `field`, before it reaches a spawn, a path or an env. */
export function rejectNul(value: string, field: string): string {
  if (value.includes('\0')) {
    throw new ServiceError('VALIDATION_ERROR', `${field} contains a NUL byte (\\0), which a command line, path or environment cannot carry`, { field });
  }
  return value;
}

export function requiredString(body: Body, field: string, opts: StringOptions = {}): string {
  const v = body[field];
  if (v === undefined || v === null) throw new ServiceError('VALIDATION_ERROR', `${field} is required`, { field });
  if (typeof v !== 'string') throw invalid(field, 'a string');
  if (!opts.allowEmpty && v === '') throw invalid(field, 'a non-empty string');
  return opts.allowNul ? v : rejectNul(v, field);
}

export function optionalString(body: Body, field: string, opts: Pick<StringOptions, 'allowNul'> = {}): string | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw invalid(field, 'a string');
  return opts.allowNul ? v : rejectNul(v, field);
}

export function optionalBoolean(body: Body, field: string): boolean | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'boolean') throw invalid(field, 'a boolean');
  return v;
}

export function optionalStringArray(body: Body, field: string): string[] | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) throw invalid(field, 'an array of strings');
  return v.map((item, i) => {
    if (typeof item === 'string') return rejectNul(item, `${field}[${i}]`);
    if (typeof item === 'number' || typeof item === 'boolean') return String(item);
    throw invalid(`${field}[${i}]`, 'a string');
  });
}

/**
 * Input for the process's stdin: `stdin` as text, or bytes when `stdin_encoding` is "base64".
 * Absent: stdin is /dev/null (nothing a process reads can hang waiting for input).
 */
export function stdinInput(body: Body): Buffer | undefined {
  const text = optionalString(body, 'stdin', { allowNul: true });
  const encoding = optionalString(body, 'stdin_encoding') ?? 'utf8';
  if (encoding !== 'utf8' && encoding !== 'utf-8' && encoding !== 'base64') throw invalid('stdin_encoding', '"utf8" or "base64"');
  if (text === undefined) return undefined;
  if (encoding !== 'base64') return Buffer.from(text, 'utf8');
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text.replace(/\s+/g, ''))) throw invalid('stdin', 'base64 text (stdin_encoding is base64)');
  return Buffer.from(text, 'base64');
}

/** A timeout in seconds: a positive number up to maxSeconds (strings of digits are accepted too). */
export function timeoutSeconds(body: Body, field: string, defaultSeconds: number, maxSeconds: number): number {
  let v = body[field];
  if (v === undefined || v === null) return defaultSeconds;
  if (typeof v === 'string' && /^\d+(\.\d+)?$/.test(v)) v = Number(v);
  if (typeof v !== 'number' || !Number.isFinite(v)) throw invalid(field, 'a number of seconds');
  if (v <= 0 || v > maxSeconds) {
    throw new ServiceError('VALIDATION_ERROR', `${field} must be between 0 and ${maxSeconds} seconds`, { field });
  }
  return v;
}

/** working_dir or workdir (api-decisions.md §4 accepts both). */
export function workingDir(body: Body): string | undefined {
  return optionalString(body, 'working_dir') ?? optionalString(body, 'workdir') ?? optionalString(body, 'cwd');
}
