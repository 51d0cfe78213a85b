import { chown, cp, lstat, mkdir, rename, rm, stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { ServiceImpl } from '@connectrpc/connect';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { fsError } from '../files/errors.js';
import { ServiceError } from '../proto.js';
import type { EnvdDeps } from './deps.js';
import { entryInfo, listEntries } from './entries.js';
import { toConnectError } from './errors.js';
import { Filesystem, type WatchDirResponseSchema } from './gen/filesystem/filesystem_pb.js';
import { keepaliveMs, StreamQueue } from './stream-queue.js';
import { userPath, type SandboxUser } from './users.js';
import { DirWatch } from './watcher.js';

type WatchInit = MessageInitShape<typeof WatchDirResponseSchema>;

/** Deepest ListDir. */
const MAX_DEPTH = 64;

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

export function filesystemService(d: EnvdDeps): ServiceImpl<typeof Filesystem> {
  const who = (h: Headers) => d.users.fromAuthorization(h.get('authorization'));
  const guard = <A extends unknown[], R>(what: string, fn: (...a: A) => Promise<R> | R) => async (...a: A): Promise<R> => {
    try {
      return await fn(...a);
    } catch (err) {
      throw toConnectError(err, what);
    }
  };
  const helper = () => {
    if (!d.agent.helperPath) throw new ServiceError('INVALID_STATE', 'this sandbox cannot watch files (sbx-helper is missing)');
    return d.agent.helperPath;
  };

  return {
    stat: guard('Stat', async (req, ctx) => {
      const path = userPath(req.path, who(ctx.requestHeader));
      return { entry: await entryInfo(path, d.users) };
    }),

    makeDir: guard('MakeDir', async (req, ctx) => {
      const user = who(ctx.requestHeader);
      const path = userPath(req.path, user);
      const existing = await lstat(path).catch(() => null);
      if (existing?.isDirectory()) throw new ServiceError('ALREADY_EXISTS', `directory ${path} already exists`, { path });
      if (existing) throw new ServiceError('NOT_A_DIRECTORY', `${path} exists and is not a directory`, { path });
      if (!(await makeDirsAs(path, user))) throw new ServiceError('ALREADY_EXISTS', `directory ${path} already exists`, { path });
      return { entry: await entryInfo(path, d.users) };
    }),

    move: guard('Move', async (req, ctx) => {
      const user = who(ctx.requestHeader);
      const source = userPath(req.source, user, 'source');
      const destination = userPath(req.destination, user, 'destination');
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

    listDir: guard('ListDir', async (req, ctx) => {
      const path = userPath(req.path, who(ctx.requestHeader));
      const depth = req.depth === 0 ? 1 : req.depth;
      if (depth > MAX_DEPTH) throw new ServiceError('VALIDATION_ERROR', `depth must be at most ${MAX_DEPTH}`, { field: 'depth' });
      await mustBeDir(path);
      return { entries: await listEntries(path, depth, d.users) };
    }),

    remove: guard('Remove', async (req, ctx) => {
      const path = userPath(req.path, who(ctx.requestHeader));
      if (path === '/') throw new ServiceError('INVALID_PATH', 'refusing to remove /', { path });
      await lstat(path).catch((err: unknown) => Promise.reject(fsError(err, path)));
      await rm(path, { recursive: true, force: true }).catch((err: unknown) => Promise.reject(fsError(err, path)));
      return {};
    }),

    async *watchDir(req, ctx) {
      const queue = new StreamQueue<WatchInit>();
      let watch: DirWatch;
      try {
        const root = userPath(req.path, who(ctx.requestHeader));
        await mustBeDir(root);
        await new Promise<void>((resolve, reject) => {
          let ready = false;
          watch = new DirWatch(helper(), { root, recursive: req.recursive, includeEntry: req.includeEntry }, d.users, {
            ready: () => {
              ready = true;
              resolve();
            },
            event: (e) => queue.push({ event: { case: 'filesystem', value: e } }),
            closed: (err) => {
              if (!ready) reject(err ?? new ServiceError('FILE_NOT_FOUND', `${root} went away before it was watched`, { path: root }));
              else if (err) queue.fail(toConnectError(err, 'WatchDir'));
              else queue.end();
            },
          });
        });
      } catch (err) {
        throw toConnectError(err, 'WatchDir');
      }
      const keepalive = setInterval(() => queue.push({ event: { case: 'keepalive', value: {} } }), keepaliveMs(ctx.requestHeader.get('keepalive-ping-interval')));
      const gone = () => queue.end();
      ctx.signal.addEventListener('abort', gone, { once: true });
      try {
        yield { event: { case: 'start', value: {} } };
        for await (const e of queue) yield e;
      } finally {
        clearInterval(keepalive);
        ctx.signal.removeEventListener('abort', gone);
        watch!.stop();
      }
    },

    createWatcher: guard('CreateWatcher', async (req, ctx) => {
      const root = userPath(req.path, who(ctx.requestHeader));
      await mustBeDir(root);
      const watcherId = await d.watchers.create(helper(), { root, recursive: req.recursive, includeEntry: req.includeEntry }, d.users);
      return { watcherId };
    }),

    getWatcherEvents: guard('GetWatcherEvents', (req) => ({ events: d.watchers.take(req.watcherId) })),

    removeWatcher: guard('RemoveWatcher', (req) => {
      d.watchers.remove(req.watcherId);
      return {};
    }),
  };
}
