import type { ApiClient } from '@sandboxd/sdk';
import type { Io } from './output.js';

export interface OptionSpec {
  type: 'string' | 'boolean';
  short?: string;
  multiple?: boolean;
  /** Placeholder shown in help, e.g. SECONDS. */
  value?: string;
  help: string;
}

export interface Parsed {
  values: Record<string, string | boolean | string[] | boolean[] | undefined>;
  positionals: string[];
  /** Arguments after `--`, for commands that take a command line. */
  rest: string[] | undefined;
}

export interface Context {
  io: Io;
  client: ApiClient;
  /** Print machine-readable JSON on stdout. */
  json: boolean;
  /** Aborted on Ctrl-C / SIGTERM. */
  signal: AbortSignal;
  out(text: string): void;
  err(text: string): void;
}

export interface Command {
  /** `create`, or `template build` for sub-commands. */
  name: string;
  summary: string;
  /** The arguments part of the usage line, e.g. `ID -- COMMAND [ARG...]`. */
  args: string;
  /** More text under the usage line. */
  details?: string;
  examples?: string[];
  options: Record<string, OptionSpec>;
  minArgs: number;
  maxArgs: number;
  /** Takes a command line after `--`. */
  passThrough?: boolean;
  run(ctx: Context, parsed: Parsed): Promise<number>;
}

export const GLOBAL_OPTIONS: Record<string, OptionSpec> = {
  json: { type: 'boolean', help: 'print JSON on stdout (for scripts)' },
  'api-url': { type: 'string', value: 'URL', help: 'lifecycle API address (default $SANDBOXD_API_URL or http://127.0.0.1:8080)' },
  'api-key': { type: 'string', value: 'KEY', help: 'API key (default $SANDBOXD_API_KEY)' },
  help: { type: 'boolean', short: 'h', help: 'show help' },
};
