import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { stat } from 'node:fs/promises';
import type { WebSocket } from 'ws';
import type { Agent, UpgradeRoute } from '../context.js';
import { fsError } from '../files/errors.js';
import { resolvePath } from '../files/paths.js';
import { ServiceError } from '../proto.js';
import { PacedSender } from './frames.js';
import { acceptWebSocket, parseObjectFrame } from './upgrade.js';
import { errorFrame } from '../http/errors.js';
import { MAX_WATCHED_DIRS, WatchRecordParser } from '../files/watch-records.js';

/** Watches open at once in one sandbox. */
export const MAX_WATCHES = 32;
/** Change frames waiting for the client at most; beyond this they are dropped and counted. */
const MAX_QUEUED_FRAMES = 2000;

let open = 0;

/**
 * WebSocket /files/watch: the client sends {"action":"watch","path":"/workspace"} (or gives
 * ?path=); the agent sends one
 * {"type":"change","event":"created"|"modified"|"deleted"|"renamed","path","is_dir","timestamp"}
 * frame per change below it (renamed also carries old_path). With "ack":true (or ?ack=1) it first
 * answers {"type":"watching","path"} once the whole tree is watched: changes made after that are
 * never missed. It is opt-in because real clients type every frame of this socket as a change. A new watch frame replaces the
 * watch; {"action":"unwatch"} ends it. Kernel-dropped events and trees too big to follow are
 * reported as {"type":"warning","code","message"}. inotify does the watching (sbx-helper watch).
 */
export function watchRoute(agent: Agent, helperPath: string): UpgradeRoute {
  return {
    path: '/files/watch',
    handler: (req, socket, head, requestId) => {
      void acceptWebSocket(req, socket, head, requestId).then((ws) => {
        const out = new PacedSender(ws);
        let current: ChildProcessWithoutNullStreams | null = null;
        let generation = 0;

        const stopCurrent = () => {
          generation++;
          if (!current) return;
          const child = current;
          current = null;
          open--;
          child.stdin.end();
          child.kill('SIGTERM');
        };

        const fail = (err: unknown) => {
          out.send(errorFrame(err, requestId, 'WebSocket /files/watch'));
        };

        const start = async (rawPath: unknown, ack: boolean) => {
          stopCurrent();
          const mine = generation;
          const root = resolvePath(rawPath ?? agent.config.workspaceDir, agent.config.workspaceDir);
          const st = await stat(root).catch((err: unknown) => {
            throw fsError(err, root);
          });
          if (!st.isDirectory()) throw new ServiceError('NOT_A_DIRECTORY', `${root} is not a directory; watch the directory that holds it`, { path: root });
          if (mine !== generation || ws.readyState !== ws.OPEN) return;
          if (open >= MAX_WATCHES) {
            throw new ServiceError('QUOTA_EXCEEDED', `at most ${MAX_WATCHES} watches may be open in one sandbox; close one first`);
          }
          open++;
          current = spawnWatcher(helperPath, root, ack, out, ws, () => {
            if (mine === generation) {
              current = null;
              open--;
            }
          });
        };

        const url = new URL(req.url ?? '/', 'http://agent');
        const ackParam = ['1', 'true'].includes(url.searchParams.get('ack') ?? '');
        if (url.searchParams.has('path')) void start(url.searchParams.get('path'), ackParam).catch(fail);
        ws.on('message', (data) => {
          const frame = parseObjectFrame(data);
          const action = frame?.action ?? frame?.type;
          if (action === 'watch') void start(frame?.path, frame?.ack === true || ackParam).catch(fail);
          else if (action === 'unwatch') stopCurrent();
          else fail(new ServiceError('VALIDATION_ERROR', 'send {"action":"watch","path":"/workspace"} or {"action":"unwatch"}'));
        });
        ws.on('close', () => {
          out.stop();
          stopCurrent();
        });
      });
    },
  };
}

function spawnWatcher(helperPath: string, root: string, ack: boolean, out: PacedSender, ws: WebSocket, onExit: () => void): ChildProcessWithoutNullStreams {
  const child = spawn(helperPath, ['watch', root, String(MAX_WATCHED_DIRS)], { stdio: ['pipe', 'pipe', 'pipe'] });
  const parser = new WatchRecordParser();
  let dropped = 0;
  let stderr = '';
  let ready = false;
  child.stdin.on('error', () => undefined);
  child.stderr.on('data', (c: Buffer) => {
    if (stderr.length < 4096) stderr += c.toString('utf8');
  });
  child.stdout.on('data', (chunk: Buffer) => {
    for (const r of parser.push(chunk)) {
      switch (r.event) {
        case 'ready':
          ready = true;
          if (ack) out.send({ type: 'watching', path: r.path, timestamp: new Date().toISOString() });
          break;
        case 'overflow':
          out.send({ type: 'warning', code: 'EVENTS_DROPPED', message: 'changes came faster than they could be reported; some were dropped' });
          break;
        case 'limit':
          out.send({ type: 'warning', code: 'WATCH_LIMIT', message: `only the first ${MAX_WATCHED_DIRS} directories below ${root} are watched` });
          break;
        case 'gone':
          out.send({ type: 'change', event: 'deleted', path: r.path, is_dir: true, timestamp: new Date().toISOString() });
          void out.drained().then(() => ws.close(1000, 'the watched directory was removed'));
          break;
        default: {
          if (out.pending >= MAX_QUEUED_FRAMES) {
            dropped++;
            break;
          }
          if (dropped > 0) {
            out.send({ type: 'warning', code: 'EVENTS_DROPPED', message: `${dropped} changes were dropped: the client read too slowly` });
            dropped = 0;
          }
          const frame: Record<string, unknown> & { type: string } = { type: 'change', event: r.event, path: r.path, is_dir: r.isDir };
          if (r.event === 'renamed') frame.old_path = r.oldPath;
          frame.timestamp = new Date().toISOString();
          out.send(frame);
        }
      }
    }
  });
  let exited = false;
  const exit = () => {
    if (exited) return;
    exited = true;
    onExit();
  };
  child.on('error', (err) => {
    // A helper that could not be started may never emit 'close'.
    exit();
    out.send({ type: 'error', error: `cannot watch ${root}: ${err.message}`, code: 'INTERNAL_ERROR' });
  });
  child.on('close', (code) => {
    exit();
    if (!ready && code !== null && code !== 0) {
      out.send({ type: 'error', error: `cannot watch ${root}: ${stderr.trim() || `exit ${code}`}`, code: 'INTERNAL_ERROR', path: root });
    }
  });
  return child;
}
