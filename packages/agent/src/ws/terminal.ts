import { spawn } from 'node:child_process';
import { StringDecoder } from 'node:string_decoder';
import type { Writable } from 'node:stream';
import type { Agent, UpgradeRoute } from '../context.js';
import { effectiveEnv } from '../env/store.js';
import { which } from '../exec/which.js';
import { PacedSender } from './frames.js';
import { acceptWebSocket, parseFrame } from './upgrade.js';

/** After the shell exits the socket stays open for the client to close; at most this long. */
const CLOSE_AFTER_EXIT_MS = 60_000;

function dimension(value: unknown, fallback: number): number {
  const n = typeof value === 'number' ? value : typeof value === 'string' ? Number(value) : NaN;
  return Number.isInteger(n) && n > 0 && n < 10000 ? n : fallback;
}

/**
 * WebSocket /terminal: an interactive shell on a pseudo-terminal (made by sbx-helper's pty mode).
 * Client frames {type:"input", data} and {type:"resize", cols, rows}; server frames
 * {type:"output", data} and finally {type:"exit", code}.
 */
export function terminalRoute(agent: Agent, helperPath: string): UpgradeRoute {
  return {
    path: '/terminal',
    handler: (req, socket, head, requestId) => {
      void (async () => {
        // Everything that awaits happens before the upgrade: once the socket is accepted, the
        // message handler must be attached at once, or input typed right after connecting is lost.
        const url = new URL(req.url ?? '/', 'http://agent');
        const cols = dimension(url.searchParams.get('cols'), 80);
        const rows = dimension(url.searchParams.get('rows'), 24);
        const env = effectiveEnv(agent.config.baseEnv, agent.envStore.all(), undefined);
        env.TERM ??= 'xterm-256color';
        const shell = (await which('bash', env.PATH)) ?? '/bin/sh';
        const ws = await acceptWebSocket(req, socket, head, requestId);
        const out = new PacedSender(ws);
        const child = spawn(helperPath, ['pty', String(cols), String(rows), '--', shell], {
          cwd: agent.config.workspaceDir,
          env,
          stdio: ['pipe', 'pipe', 'pipe', 'pipe'],
        });
        const control = child.stdio[3] as Writable;
        const decoder = new StringDecoder('utf8');
        child.stdout.on('data', (c: Buffer) => out.output('output', decoder.write(c)));
        child.stderr.on('data', (c: Buffer) => out.output('output', c.toString('utf8')));
        for (const s of [child.stdin, control]) s.on('error', () => undefined);
        child.on('error', (err) => {
          out.send({ type: 'error', error: err.message, code: 'INTERNAL_ERROR' });
          out.send({ type: 'exit', code: -1 });
        });
        child.on('close', (code) => {
          out.output('output', decoder.end());
          out.send({ type: 'exit', code: code ?? -1 });
          void out.drained().then(() => setTimeout(() => ws.close(1000, 'shell exited'), CLOSE_AFTER_EXIT_MS).unref());
        });
        ws.on('message', (data, isBinary) => {
          if (isBinary) {
            child.stdin.write(data as Buffer);
            return;
          }
          const frame = parseFrame(data);
          if (!frame) {
            child.stdin.write(String(data));
          } else if (frame.type === 'input' && typeof frame.data === 'string') {
            child.stdin.write(frame.data);
          } else if (frame.type === 'resize') {
            control.write(`${dimension(frame.cols, cols)} ${dimension(frame.rows, rows)}\n`);
          }
        });
        ws.on('close', () => {
          out.stop();
          // The helper hangs up the terminal when its input closes; make sure the tree goes too.
          child.stdin.end();
          const t = setTimeout(() => child.exitCode === null && child.kill('SIGTERM'), 2000);
          t.unref();
        });
      })();
    },
  };
}
