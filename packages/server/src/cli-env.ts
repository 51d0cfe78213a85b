import { existsSync, readFileSync } from 'node:fs';

/** Where the systemd layout keeps control's settings (deploy/systemd/control.env.example, docs/systemd.md). */
export const CONTROL_ENV_FILE = '/etc/sandboxd/control.env';

/**
 * The commands that work on a cluster's store or keys as control does. Run on a control machine
 * with neither SANDBOXD_DATABASE_URL nor SANDBOXD_DATA_DIR, they read control's file: the systemd
 * layout keeps the database's URL there and nowhere else, and the SQLite of /var/lib/sandboxd would
 * answer for the cluster instead. A data directory named outright is the state asked for.
 */
const CLUSTER_ADMIN_COMMANDS = new Set(['orgs', 'keys', 'nodes', 'cluster']);

export class EnvFileError extends Error {}

/**
 * The variables of an environment file as systemd's EnvironmentFile= reads the simple ones:
 * NAME=value lines, blank lines and lines starting with # or ; skipped, a value in matching single
 * or double quotes taken without them. Anything else is refused with its line, rather than guessed.
 */
export function parseEnvFile(text: string, file: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [i, raw] of text.split('\n').entries()) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
    const m = /^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$/.exec(line);
    if (!m) throw new EnvFileError(`${file}:${i + 1}: not NAME=value`);
    let value = m[2]!;
    const q = /^(["'])(.*)\1$/.exec(value);
    if (q) value = q[2]!;
    else if (/^["']/.test(value)) throw new EnvFileError(`${file}:${i + 1}: ${m[1]}: a quote that does not end the value`);
    out[m[1]!] = value;
  }
  return out;
}

export interface EnvFileChoice {
  /** The arguments without --env-file. */
  argv: string[];
  /** The file read, if any. */
  file: string | undefined;
  /** Read because the command works on the cluster and the environment named no database, not because it was asked for. */
  defaulted: boolean;
}

/**
 * `--env-file FILE` (or `--env-file=FILE`) anywhere among the arguments: the file's variables go
 * into `env` where it has none of its own (the environment wins, as with node's --env-file).
 * Without it, a command of CLUSTER_ADMIN_COMMANDS whose environment has neither
 * SANDBOXD_DATABASE_URL nor SANDBOXD_DATA_DIR reads `defaultFile` when that file exists.
 */
export function applyEnvFile(argv: string[], env: NodeJS.ProcessEnv, defaultFile: string = CONTROL_ENV_FILE): EnvFileChoice {
  const rest: string[] = [];
  let asked: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--env-file' || a.startsWith('--env-file=')) {
      const value = a === '--env-file' ? argv[++i] : a.slice('--env-file='.length);
      if (!value) throw new EnvFileError('--env-file needs a file');
      if (asked !== undefined) throw new EnvFileError('--env-file once');
      asked = value;
    } else {
      rest.push(a);
    }
  }
  const defaulted = asked === undefined && CLUSTER_ADMIN_COMMANDS.has(rest[0] ?? '') && !env.SANDBOXD_DATABASE_URL?.trim() && !env.SANDBOXD_DATA_DIR?.trim() && existsSync(defaultFile);
  const file = asked ?? (defaulted ? defaultFile : undefined);
  if (file === undefined) return { argv: rest, file, defaulted };
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new EnvFileError(`cannot read ${file}${defaulted ? " (control's settings, read because neither SANDBOXD_DATABASE_URL nor SANDBOXD_DATA_DIR is set)" : ''}: ${(err as Error).message}`);
  }
  for (const [name, value] of Object.entries(parseEnvFile(text, file))) {
    if (env[name] === undefined || env[name] === '') env[name] = value;
  }
  return { argv: rest, file, defaulted };
}
