import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import { agentFrames, AgentShape, callAgent, FRAME, jsonFrame, type EnvdCall } from './agent-call.js';
import { guarded, keepaliveHeader, toConnectError, type OnEnvdFault } from './errors.js';
import { EventType, Filesystem, FileType, type EntryInfoSchema, type FilesystemEventSchema, type WatchDirResponseSchema } from './gen/filesystem/filesystem_pb.js';

// Maps, not objects: what the agent sends is looked up, never a property of Object's prototype.
const FILE_TYPE = new Map<string, FileType>([
  ['file', FileType.FILE],
  ['dir', FileType.DIRECTORY],
  ['symlink', FileType.SYMLINK],
]);
const EVENT_TYPE = new Map<string, EventType>([
  ['create', EventType.CREATE],
  ['write', EventType.WRITE],
  ['remove', EventType.REMOVE],
  ['rename', EventType.RENAME],
  ['chmod', EventType.CHMOD],
]);

function entryInfo(v: unknown, shape: AgentShape): MessageInitShape<typeof EntryInfoSchema> {
  const e = shape.obj(v, 'an entry');
  const symlinkTarget = shape.optStr(e.symlink_target, 'an entry');
  return {
    name: shape.str(e.name, 'an entry'),
    type: FILE_TYPE.get(shape.str(e.type, 'an entry')) ?? FileType.UNSPECIFIED,
    path: shape.str(e.path, 'an entry'),
    size: BigInt(shape.int(e.size, 'a size', 0, Number.MAX_SAFE_INTEGER)),
    mode: shape.int(e.mode, 'a mode'),
    permissions: shape.str(e.permissions, 'an entry'),
    owner: shape.str(e.owner, 'an entry'),
    group: shape.str(e.group, 'an entry'),
    // Milliseconds since the epoch, a protobuf Timestamp's range (years 1 to 9999).
    modifiedTime: timestampFromMs(shape.int(e.mtime_ms, 'a modification time', -62_135_596_800_000, 253_402_300_799_999)),
    ...(symlinkTarget !== undefined ? { symlinkTarget } : {}),
  };
}

function fsEvent(v: unknown, shape: AgentShape): MessageInitShape<typeof FilesystemEventSchema> {
  const e = shape.obj(v, 'an event');
  return {
    name: shape.str(e.name, 'an event'),
    type: EVENT_TYPE.get(shape.str(e.type, 'an event')) ?? EventType.UNSPECIFIED,
    ...(e.entry !== undefined ? { entry: entryInfo(e.entry, shape) } : {}),
  };
}

/**
 * E2B's filesystem.Filesystem, served in the daemon over the agent's plain file routes: the files
 * are read and written in the sandbox, as the user the client names.
 */
export function filesystemService(callOf: (ctx: HandlerContext) => EnvdCall, onFault: OnEnvdFault): ServiceImpl<typeof Filesystem> {
  const guard = guarded(onFault);
  const shapeOf = (ctx: HandlerContext) => new AgentShape(callOf(ctx).sandboxId);
  /** A call that acts as the client's user: the agent's answer, an object. */
  const asUser = async (ctx: HandlerContext, path: string, body: Record<string, unknown>) => {
    const call = callOf(ctx);
    return shapeOf(ctx).obj(await callAgent<unknown>(call, 'POST', path, { authorization: call.authorization, ...body }, ctx.signal), 'an answer');
  };
  const post = async (ctx: HandlerContext, path: string, body: unknown) => shapeOf(ctx).obj(await callAgent<unknown>(callOf(ctx), 'POST', path, body, ctx.signal), 'an answer');
  const withEntry = async (ctx: HandlerContext, p: Promise<Record<string, unknown>>) => ({ entry: entryInfo((await p).entry, shapeOf(ctx)) });

  return {
    stat: guard('Stat', (req, ctx) => withEntry(ctx, asUser(ctx, '/e2b/rt/fs/stat', { path: req.path }))),
    makeDir: guard('MakeDir', (req, ctx) => withEntry(ctx, asUser(ctx, '/e2b/rt/fs/make-dir', { path: req.path }))),
    move: guard('Move', (req, ctx) => withEntry(ctx, asUser(ctx, '/e2b/rt/fs/move', { source: req.source, destination: req.destination }))),

    listDir: guard('ListDir', async (req, ctx) => {
      const shape = shapeOf(ctx);
      const { entries } = await asUser(ctx, '/e2b/rt/fs/list', { path: req.path, depth: req.depth });
      return { entries: shape.arr(entries, 'a list of entries').map((e) => entryInfo(e, shape)) };
    }),

    remove: guard('Remove', async (req, ctx) => {
      await asUser(ctx, '/e2b/rt/fs/remove', { path: req.path });
      return {};
    }),

    async *watchDir(req, ctx) {
      const call = callOf(ctx);
      const shape = new AgentShape(call.sandboxId);
      const keepalive = keepaliveHeader(ctx.requestHeader.get('keepalive-ping-interval'));
      const body = { authorization: call.authorization, path: req.path, recursive: req.recursive, include_entry: req.includeEntry, ...(keepalive ? { keepalive_ms: keepalive } : {}) };
      try {
        for await (const f of agentFrames(call, '/e2b/rt/fs/watch', body, ctx.signal)) {
          let out: MessageInitShape<typeof WatchDirResponseSchema> | undefined;
          if (f.kind === FRAME.keepalive) out = { event: { case: 'keepalive', value: {} } };
          else if (f.kind === FRAME.json) {
            const e = jsonFrame(f, shape);
            if (e.start !== undefined) out = { event: { case: 'start', value: {} } };
            else if (e.event !== undefined) out = { event: { case: 'filesystem', value: fsEvent(e.event, shape) } };
          }
          if (out) yield out;
        }
      } catch (err) {
        throw toConnectError(err, 'WatchDir', onFault);
      }
    },

    createWatcher: guard('CreateWatcher', async (req, ctx) => {
      const { watcher_id } = await asUser(ctx, '/e2b/rt/fs/watchers', { path: req.path, recursive: req.recursive, include_entry: req.includeEntry });
      return { watcherId: shapeOf(ctx).str(watcher_id, 'a watcher id') };
    }),

    getWatcherEvents: guard('GetWatcherEvents', async (req, ctx) => {
      const shape = shapeOf(ctx);
      const { events } = await post(ctx, '/e2b/rt/fs/watchers/events', { watcher_id: req.watcherId });
      return { events: shape.arr(events, 'a list of events').map((e) => fsEvent(e, shape)) };
    }),

    removeWatcher: guard('RemoveWatcher', async (req, ctx) => {
      await post(ctx, '/e2b/rt/fs/watchers/remove', { watcher_id: req.watcherId });
      return {};
    }),
  };
}
