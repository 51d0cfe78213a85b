import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { appendFileSync, chownSync, closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { freePort } from './registry-fixtures.js';

/** A PostgreSQL server of a test's own: its own data directory, socket directory and port. */
export interface TestPostgres {
  /** The `postgres` database as the superuser, password included. */
  url: string;
  password: string;
  /** A new empty database (optionally with an ICU default collation, e.g. `en-US`); its URL. */
  createDatabase(opts?: { icuLocale?: string }): Promise<string>;
  /**
   * Stops the server (a fast shutdown: sessions are ended), runs `whileDown`, and starts it again
   * on the same port and data.
   */
  restart(whileDown?: () => Promise<void>): Promise<void>;
  /** Stops the server and removes its directory. */
  stop(): Promise<void>;
}

const PG_ROOT = '/usr/lib/postgresql';

/** The newest Debian PostgreSQL's bin directory; a test that needs one fails without it, it never skips. */
export function postgresBinDir(): string {
  const versions = existsSync(PG_ROOT)
    ? readdirSync(PG_ROOT)
        .filter((v) => /^\d+$/.test(v) && existsSync(join(PG_ROOT, v, 'bin', 'postgres')))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (versions.length === 0) {
    throw new Error(
      `PostgreSQL's server is not installed (no ${PG_ROOT}/<version>/bin/postgres): the PostgreSQL store's tests start one of their own. ` +
        `Install Debian's postgresql package (scripts/test.mjs installs it from scripts/test-packages.txt).`,
    );
  }
  return join(PG_ROOT, versions[0]!, 'bin');
}

/** PostgreSQL refuses to run as root: as root, its processes run as the `postgres` user. */
function serverUser(): { uid: number; gid: number } | undefined {
  if (process.getuid?.() !== 0) return undefined;
  try {
    const id = (flag: string) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }).trim());
    return { uid: id('-u'), gid: id('-g') };
  } catch {
    throw new Error('there is no `postgres` user to run PostgreSQL as (Debian\'s postgresql package creates it)');
  }
}

function run(cmd: string, args: string[], opts: { user: ReturnType<typeof serverUser>; cwd: string; log: string }): Promise<void> {
  return new Promise((resolve, reject) => {
    const out = openSync(opts.log, 'a');
    const child = spawn(cmd, args, { cwd: opts.cwd, env: serverEnv(opts.cwd), stdio: ['ignore', out, out], ...opts.user });
    closeSync(out);
    child.once('error', reject);
    child.once('exit', (code, signal) =>
      code === 0 ? resolve() : reject(new Error(`${cmd} ${args[0] ?? ''} failed (${signal ?? `exit ${code}`}):\n${tail(opts.log)}`)),
    );
  });
}

const serverEnv = (home: string) => ({ PATH: '/usr/bin:/bin', LC_ALL: 'C.UTF-8', LANG: 'C.UTF-8', HOME: home });

function tail(file: string): string {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-20).join('\n');
  } catch {
    return '(no log)';
  }
}

/** Resolves once the process has exited (at once if it has). */
function exited(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

/** A fast shutdown (SIGINT), then an immediate one (SIGQUIT) if it takes more than 10 s. */
async function halt(child: ChildProcess): Promise<void> {
  const done = exited(child);
  child.kill('SIGINT');
  const late = setTimeout(() => child.kill('SIGQUIT'), 10_000);
  await done;
  clearTimeout(late);
}

export interface PostgresOptions {
  /**
   * IPv4 CIDRs besides loopback that may connect (with the password), e.g. the range of the test
   * nodes' network namespaces. With any, the server listens on every IPv4 address (the namespaces'
   * host ends come and go while it runs) and pg_hba.conf admits those ranges only.
   */
  clients?: string[];
}

/**
 * initdb's a cluster in a new temporary directory and starts `postgres` on 127.0.0.1 (a free port;
 * password auth over TCP) with its socket in that directory: the system's own cluster is never
 * touched. fsync is off: the data is thrown away. The server is stopped by its pid and the
 * directory removed by `stop()`, or when the process exits without it.
 */
export async function startPostgres(opts: PostgresOptions = {}): Promise<TestPostgres> {
  const clients = opts.clients ?? [];
  for (const c of clients) if (!/^\d{1,3}(\.\d{1,3}){3}\/\d{1,2}$/.test(c)) throw new Error(`not an IPv4 CIDR: ${c}`);
  const bin = postgresBinDir();
  const user = serverUser();
  const dir = await mkdtemp(join(tmpdir(), 'sbd-pg-'));
  let child: ChildProcess | undefined;
  const onExit = () => {
    if (child?.pid !== undefined && child.exitCode === null && child.signalCode === null) child.kill('SIGQUIT');
    rmSync(dir, { recursive: true, force: true });
  };
  process.on('exit', onExit);
  const data = join(dir, 'data');
  const sockets = join(dir, 'sock');
  const log = join(dir, 'postgres.log');
  const password = randomBytes(18).toString('hex');
  let port = 0;
  const urlOf = (database: string) => `postgresql://postgres:${password}@127.0.0.1:${port}/${database}`;

  const launch = async (): Promise<void> => {
    const out = openSync(log, 'a');
    const proc = spawn(
      join(bin, 'postgres'),
      ['-D', data, '-p', String(port), '-c', `listen_addresses=${clients.length > 0 ? '0.0.0.0' : '127.0.0.1'}`, '-c', `unix_socket_directories=${sockets}`, '-c', 'fsync=off', '-c', 'synchronous_commit=off', '-c', 'full_page_writes=off'],
      { cwd: dir, env: serverEnv(dir), stdio: ['ignore', 'ignore', out], ...user },
    );
    closeSync(out);
    child = proc;
    const deadline = Date.now() + 30_000;
    for (;;) {
      if (proc.exitCode !== null || proc.signalCode !== null) throw new Error(`postgres exited at start:\n${tail(log)}`);
      const client = new pg.Client({ connectionString: urlOf('postgres'), connectionTimeoutMillis: 1000 });
      try {
        await client.connect();
        await client.end();
        return;
      } catch (err) {
        await client.end().catch(() => undefined);
        if (Date.now() > deadline) {
          await halt(proc);
          throw new Error(`postgres did not accept connections within 30 s (${String(err)}):\n${tail(log)}`);
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  };

  try {
    mkdirSync(sockets);
    writeFileSync(join(dir, 'pwfile'), `${password}\n`);
    if (user) for (const p of [dir, sockets, join(dir, 'pwfile')]) chownSync(p, user.uid, user.gid);
    await run(
      join(bin, 'initdb'),
      ['-D', data, '-U', 'postgres', `--pwfile=${join(dir, 'pwfile')}`, '--auth-local=trust', '--auth-host=scram-sha-256', '-E', 'UTF8', '--locale=C.UTF-8', '--no-sync', '--no-instructions'],
      { user, cwd: dir, log },
    );
    rmSync(join(dir, 'pwfile'));
    // initdb's file admits loopback; these ranges too, with the password, and nothing else.
    if (clients.length > 0) appendFileSync(join(data, 'pg_hba.conf'), clients.map((c) => `host all all ${c} scram-sha-256\n`).join(''));
    // The free port may be taken before postgres binds it: a few tries.
    for (let attempt = 1; ; attempt++) {
      port = await freePort();
      try {
        await launch();
        break;
      } catch (err) {
        if (attempt >= 3 || !/could not bind|Address already in use/i.test(tail(log))) throw err;
      }
    }
  } catch (err) {
    if (child) await halt(child);
    process.off('exit', onExit);
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }

  let databases = 0;
  return {
    url: urlOf('postgres'),
    password,
    async createDatabase(opts = {}) {
      const name = `sbd_test_${++databases}`;
      if (opts.icuLocale !== undefined && !/^[A-Za-z0-9-]+$/.test(opts.icuLocale)) throw new Error(`not an ICU locale: ${opts.icuLocale}`);
      const admin = new pg.Client({ connectionString: urlOf('postgres') });
      await admin.connect();
      try {
        const icu = opts.icuLocale ? ` TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE '${opts.icuLocale}' LOCALE 'C.UTF-8'` : '';
        await admin.query(`CREATE DATABASE ${name}${icu}`);
      } finally {
        await admin.end();
      }
      return urlOf(name);
    },
    async restart(whileDown) {
      if (child) await halt(child);
      try {
        await whileDown?.();
      } finally {
        await launch();
      }
    },
    async stop() {
      try {
        if (child) await halt(child);
      } finally {
        process.off('exit', onExit);
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
