import { chown, cp, lstat, mkdir, rename, rm, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Route, RouteContext } from '../context.js';
import { fsError } from '../files/errors.js';
import { ServiceError } from '../proto.js';
import type { EnvdDeps } from './deps.js';
import { entryInfo, listEntries } from './entries.js';
import { frameQueue, jsonFrame, sendFrames } from './frames.js';
import { keepaliveMs } from './stream-queue.js';
import { userPath, type SandboxUser } from './users.js';
import { DirWatch, type WatchOptions } from './watcher.js';

/** Deepest listing. */
const MAX_DEPTH = 64;

type Body = Record<string, unknown>;

/** mkdir -p, the directories it made owned by `user` (E2B's daemon makes them as the user). */
export async function makeDirsAs(path: string, user: SandboxUser): Promise<boolean> {
  let first: string | undefined;
  try {
    first = await mkdir(path, { recursive: true });
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST' || code === 'ENOTDIR') throw new ServiceError('NOT_A_DIRECTORY', `${path} or a parent of it is a file`, { path });
    throw fsError(err, path);
  }
  if (first === undefined) return false;
  if (user.uid !== 0) {
    for (let d = path; d.length >= first.length; d = dirname(d)) {
      await chown(d, user.uid, user.gid).catch(() => undefined);
      if (d === first || d === '/') break;
    }
  }
  return true;
}

async function mustBeDir(path: string): Promise<void> {
  const st = await stat(path).catch((err: unknown) => Promise.reject(fsError(err, path)));
  if (!st.isDirectory()) throw new ServiceError('NOT_A_DIRECTORY', `${path} is not a directory`, { path });
}

function who(d: EnvdDeps, body: Body): SandboxUser {
  const a = body.authorization;
  if (a !== undefined && a !== null && typeof a !== 'string') throw new ServiceError('VALIDATION_ERROR', 'authorization must be a string or null', { field: 'authorization' });
  return d.users.fromAuthorization(a ?? null);
}

function flag(body: Body, field: string): boolean {
  const v = body[field];
  if (v === undefined || v === null) return false;
  if (typeof v !== 'boolean') throw new ServiceError('VALIDATION_ERROR', `${field} must be a boolean`, { field });
  return v;
}

function watcherId(body: Body): string {
  const id = body.watcher_id;
  if (typeof id !== 'string' || id === '') throw new ServiceError('VALIDATION_ERROR', 'watcher_id is required', { field: 'watcher_id' });
  return id;
}

function helper(d: EnvdDeps): string {
  if (!d.agent.helperPath) throw new ServiceError('INVALID_STATE', 'this sandbox cannot watch files (sbx-helper is missing)');
  return d.agent.helperPath;
}

/** The directory a watch call names, checked, and its options. */
async function watchOptions(d: EnvdDeps, body: Body): Promise<WatchOptions> {
  const root = userPath(body.path, who(d, body));
  const options = { root, recursive: flag(body, 'recursive'), includeEntry: flag(body, 'include_entry') };
  await mustBeDir(root);
  return options;
}

/** A watch as a frame stream: `{"start":{}}` once it is ready (errors before are a 4xx), then its events. */
async function watch(d: EnvdDeps, body: Body, ctx: RouteContext): Promise<undefined> {
  const keepalive = keepaliveMs(body.keepalive_ms);
  const o = await watchOptions(d, body);
  const queue = frameQueue();
  // First in the stream, ahead of any event; dropped with the queue if the watch never gets ready.
  queue.push(jsonFrame({ start: {} }));
  let w: DirWatch | undefined;
  await new Promise<void>((resolve, reject) => {
    let ready = false;
    w = new DirWatch(helper(d), o, d.users, {
      ready: () => {
        ready = true;
        resolve();
      },
      event: (e) => queue.push(jsonFrame({ event: e })),
      closed: (err) => {
        if (!ready) reject(err ?? new ServiceError('FILE_NOT_FOUND', `${o.root} went away before it was watched`, { path: o.root }));
        else if (err) queue.fail(err);
        else queue.end();
      },
    });
  });
  try {
    await sendFrames(ctx.res, queue, keepalive);
  } finally {
    w?.stop();
  }
  return undefined;
}

/** The filesystem routes below `prefix`: E2B's filesystem.Filesystem, spoken by the gateway. */
export function rtFsRoutes(prefix: string, deps: () => EnvdDeps): Route[] {
  const route = (path: string, handler: (d: EnvdDeps, body: Body, ctx: RouteContext) => Promise<unknown> | unknown): Route => ({
    method: 'POST',
    path: `${prefix}/fs/${path}`,
    handler: async (ctx) => handler(deps(), await ctx.body(), ctx),
  });
  return [
    route('stat', async (d, body) => ({ entry: await entryInfo(userPath(body.path, who(d, body)), d.users) })),
    route('make-dir', async (d, body) => {
      const user = who(d, body);
      const path = userPath(body.path, user);
      const existing = await lstat(path).catch(() => null);
      if (existing?.isDirectory()) throw new ServiceError('ALREADY_EXISTS', `directory ${path} already exists`, { path });
      if (existing) throw new ServiceError('NOT_A_DIRECTORY', `${path} exists and is not a directory`, { path });
      if (!(await makeDirsAs(path, user))) throw new ServiceError('ALREADY_EXISTS', `directory ${path} already exists`, { path });
      return { entry: await entryInfo(path, d.users) };
    }),
    route('move', async (d, body) => {
      const user = who(d, body);
      const source = userPath(body.source, user, 'source');
      const destination = userPath(body.destination, user, 'destination');
      await lstat(source).catch((err: unknown) => Promise.reject(fsError(err, source)));
      await makeDirsAs(dirname(destination), user);
      try {
        await rename(source, destination);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw fsError(err, destination);
        await cp(source, destination, { recursive: true, preserveTimestamps: true, verbatimSymlinks: true }).catch((e: unknown) => Promise.reject(fsError(e, destination)));
        await rm(source, { recursive: true, force: true });
      }
      return { entry: await entryInfo(destination, d.users) };
    }),
    route('list', async (d, body) => {
      const path = userPath(body.path, who(d, body));
      const given = body.depth ?? 0;
      if (typeof given !== 'number' || !Number.isInteger(given) || given < 0) throw new ServiceError('VALIDATION_ERROR', 'depth must be an integer, 0 or more', { field: 'depth' });
      const depth = given === 0 ? 1 : given;
      if (depth > MAX_DEPTH) throw new ServiceError('VALIDATION_ERROR', `depth must be at most ${MAX_DEPTH}`, { field: 'depth' });
      await mustBeDir(path);
      return { entries: await listEntries(path, depth, d.users) };
    }),
    route('remove', async (d, body) => {
      const path = userPath(body.path, who(d, body));
      if (path === '/') throw new ServiceError('INVALID_PATH', 'refusing to remove /', { path });
      await lstat(path).catch((err: unknown) => Promise.reject(fsError(err, path)));
      await rm(path, { recursive: true, force: true }).catch((err: unknown) => Promise.reject(fsError(err, path)));
      return {};
    }),
    route('watch', watch),
    route('watchers', async (d, body) => ({ watcher_id: await d.watchers.create(helper(d), await watchOptions(d, body), d.users) })),
    route('watchers/events', (d, body) => ({ events: d.watchers.take(watcherId(body)) })),
    route('watchers/remove', (d, body) => {
      d.watchers.remove(watcherId(body));
      return {};
    }),
  ];
}
