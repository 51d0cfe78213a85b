import { pino, stdTimeFunctions, type DestinationStream, type Logger } from 'pino';

export type { Logger };

/** Query parameters that carry credentials (events tokens), and paths that are one (upload links). */
const SECRET_PARAMS = /([?&](?:token|access_token|api_key|key|sig|signature)=)[^&#]*/gi;
const SECRET_PATHS = /^(\/v1\/templates\/files\/upload\/)[^?#]+/;

/** A URL as it may be logged: no credentials in its query or its path. */
export function safeUrl(url: string): string {
  return url.replace(SECRET_PATHS, '$1[redacted]').replace(SECRET_PARAMS, '$1[redacted]');
}

/** Fields whose values are credentials wherever they appear in a log line. */
const REDACT = [
  'api_key',
  'apiKey',
  'token',
  'auth_token',
  'authToken',
  'password',
  'secret',
  '*.api_key',
  '*.apiKey',
  '*.token',
  '*.auth_token',
  '*.password',
  '*.secret',
  'headers.authorization',
  'headers["x-api-key"]',
  'req.headers.authorization',
  'req.headers["x-api-key"]',
];

const LEVEL_NAMES: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' };

/**
 * Readable lines for a terminal: `[sandboxd TIME] LEVEL message {the other fields}` (INFO is not
 * shown). Each write is one JSON line from pino.
 */
function readable(out: NodeJS.WritableStream): DestinationStream {
  return {
    write(line: string) {
      let o: Record<string, unknown>;
      try {
        o = JSON.parse(line) as Record<string, unknown>;
      } catch {
        out.write(line);
        return;
      }
      const { time, level, msg, service: _service, ...rest } = o;
      const name = LEVEL_NAMES[Number(level)] ?? String(level);
      const extra = Object.keys(rest).length ? ` ${JSON.stringify(rest)}` : '';
      out.write(`[sandboxd ${String(time)}] ${name === 'INFO' ? '' : `${name} `}${String(msg ?? '')}${extra}\n`);
    },
  };
}

/**
 * The daemon's logger (pino): one JSON object per line (level, time, msg and the fields of the
 * event) when stderr is not a terminal, readable lines on a terminal; `format` forces either.
 * Written synchronously, so that the last lines before a crash are not lost.
 */
export function createLogger(level: string, opts: { format?: 'json' | 'text'; stream?: NodeJS.WritableStream } = {}): Logger {
  const out = opts.stream ?? process.stderr;
  const text = opts.format ? opts.format === 'text' : (out as NodeJS.WriteStream).isTTY === true;
  return pino(
    {
      level,
      base: { service: 'sandboxd' },
      timestamp: stdTimeFunctions.isoTime,
      formatters: text ? undefined : { level: (label) => ({ level: label }) },
      redact: { paths: REDACT, censor: '[redacted]' },
      serializers: {
        err: pino.stdSerializers.err,
      },
    },
    text ? readable(out) : opts.stream ? (out as DestinationStream) : pino.destination({ dest: 2, sync: true }),
  );
}

/** SANDBOXD_LOG_LEVEL values pino knows. */
export const LOG_LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;
