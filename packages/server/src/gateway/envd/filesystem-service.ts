import type { HandlerContext, ServiceImpl } from '@connectrpc/connect';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import { agentFrames, callAgent, FRAME, jsonFrame, type EnvdCall } from './agent-call.js';
import { guarded, keepaliveHeader, toConnectError, type OnEnvdFault } from './errors.js';
import { EventType, Filesystem, FileType, type EntryInfoSchema, type FilesystemEventSchema, type WatchDirResponseSchema } from './gen/filesystem/filesystem_pb.js';

/** A file as the agent describes it. */
interface AgentEntry {
  name: string;
  type: 'file' | 'dir' | 'symlink';
  path: string;
  size: number;
  mode: number;
  permissions: string;
  owner: string;
  group: string;
  mtime_ms: number;
  symlink_target?: string;
}

interface AgentEvent {
  name: string;
  type: 'create' | 'write' | 'remove' | 'rename' | 'chmod';
  entry?: AgentEntry;
}

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

function entryInfo(e: AgentEntry): MessageInitShape<typeof EntryInfoSchema> {
  return {
    name: e.name,
    type: FILE_TYPE.get(e.type) ?? FileType.UNSPECIFIED,
    path: e.path,
    size: BigInt(e.size),
    mode: e.mode,
    permissions: e.permissions,
    owner: e.owner,
    group: e.group,
    modifiedTime: timestampFromMs(e.mtime_ms),
    ...(e.symlink_target !== undefined ? { symlinkTarget: e.symlink_target } : {}),
  };
}

function fsEvent(e: AgentEvent): MessageInitShape<typeof FilesystemEventSchema> {
  return { name: e.name, type: EVENT_TYPE.get(e.type) ?? EventType.UNSPECIFIED, ...(e.entry ? { entry: entryInfo(e.entry) } : {}) };
}

/**
 * E2B's filesystem.Filesystem, served in the daemon over the agent's plain file routes: the files
 * are read and written in the sandbox, as the user the client names.
 */
export function filesystemService(callOf: (ctx: HandlerContext) => EnvdCall, onFault: OnEnvdFault): ServiceImpl<typeof Filesystem> {
  const guard = guarded(onFault);
  /** A call that acts as the client's user. */
  const asUser = <T>(ctx: HandlerContext, path: string, body: Record<string, unknown>) => {
    const call = callOf(ctx);
    return callAgent<T>(call, 'POST', path, { authorization: call.authorization, ...body }, ctx.signal);
  };
  const post = <T>(ctx: HandlerContext, path: string, body: unknown) => callAgent<T>(callOf(ctx), 'POST', path, body, ctx.signal);
  const withEntry = async (p: Promise<{ entry: AgentEntry }>) => ({ entry: entryInfo((await p).entry) });

  return {
    stat: guard('Stat', (req, ctx) => withEntry(asUser(ctx, '/e2b/rt/fs/stat', { path: req.path }))),
    makeDir: guard('MakeDir', (req, ctx) => withEntry(asUser(ctx, '/e2b/rt/fs/make-dir', { path: req.path }))),
    move: guard('Move', (req, ctx) => withEntry(asUser(ctx, '/e2b/rt/fs/move', { source: req.source, destination: req.destination }))),

    listDir: guard('ListDir', async (req, ctx) => {
      const { entries } = await asUser<{ entries: AgentEntry[] }>(ctx, '/e2b/rt/fs/list', { path: req.path, depth: req.depth });
      return { entries: entries.map(entryInfo) };
    }),

    remove: guard('Remove', async (req, ctx) => {
      await asUser(ctx, '/e2b/rt/fs/remove', { path: req.path });
      return {};
    }),

    async *watchDir(req, ctx) {
      const call = callOf(ctx);
      const keepalive = keepaliveHeader(ctx.requestHeader.get('keepalive-ping-interval'));
      const body = { authorization: call.authorization, path: req.path, recursive: req.recursive, include_entry: req.includeEntry, ...(keepalive ? { keepalive_ms: keepalive } : {}) };
      try {
        for await (const f of agentFrames(call, '/e2b/rt/fs/watch', body, ctx.signal)) {
          let out: MessageInitShape<typeof WatchDirResponseSchema> | undefined;
          if (f.kind === FRAME.keepalive) out = { event: { case: 'keepalive', value: {} } };
          else if (f.kind === FRAME.json) {
            const e = jsonFrame<{ start?: object; event?: AgentEvent }>(f);
            if (e.start) out = { event: { case: 'start', value: {} } };
            else if (e.event) out = { event: { case: 'filesystem', value: fsEvent(e.event) } };
          }
          if (out) yield out;
        }
      } catch (err) {
        throw toConnectError(err, 'WatchDir', onFault);
      }
    },

    createWatcher: guard('CreateWatcher', async (req, ctx) => {
      const { watcher_id } = await asUser<{ watcher_id: string }>(ctx, '/e2b/rt/fs/watchers', { path: req.path, recursive: req.recursive, include_entry: req.includeEntry });
      return { watcherId: watcher_id };
    }),

    getWatcherEvents: guard('GetWatcherEvents', async (req, ctx) => {
      const { events } = await post<{ events: AgentEvent[] }>(ctx, '/e2b/rt/fs/watchers/events', { watcher_id: req.watcherId });
      return { events: events.map(fsEvent) };
    }),

    removeWatcher: guard('RemoveWatcher', async (req, ctx) => {
      await post(ctx, '/e2b/rt/fs/watchers/remove', { watcher_id: req.watcherId });
      return {};
    }),
  };
}
