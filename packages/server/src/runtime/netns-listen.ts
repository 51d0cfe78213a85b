import { spawn, type ChildProcess } from 'node:child_process';
import type { Socket as UdpSocket } from 'node:dgram';
import type { Server } from 'node:net';
import { fileURLToPath } from 'node:url';

export interface ListenSpec {
  proto: 'tcp' | 'udp';
  host: string;
  port: number;
}

export type Listening = { spec: ListenSpec; server: Server; udp?: undefined } | { spec: ListenSpec; udp: UdpSocket; server?: undefined };

/**
 * Listening sockets made inside the network namespace `netns` by a short-lived child
 * (egress-listener.ts) and passed to this process, which uses them from its own namespace. All of
 * them or none: on failure, those already received are closed.
 */
export async function listenInNetns(netns: string, specs: ListenSpec[], timeoutMs = 10_000): Promise<Listening[]> {
  const env = { ...process.env };
  delete env.NODE_OPTIONS;
  const script = fileURLToPath(new URL('./egress-listener.js', import.meta.url));
  const child: ChildProcess = spawn('ip', ['netns', 'exec', netns, process.execPath, script, JSON.stringify(specs)], {
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    env,
  });
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (c: string) => (stderr += c));
  const got: Listening[] = [];
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the egress listener did not start in ${timeoutMs / 1000} s`)), timeoutMs);
      child.on('message', (msg: Partial<ListenSpec>, handle: unknown) => {
        const spec = specs.find((s) => s.proto === msg.proto && s.host === msg.host && s.port === msg.port);
        if (!spec || !handle) return;
        got.push(spec.proto === 'udp' ? { spec, udp: handle as UdpSocket } : { spec, server: handle as Server });
        if (got.length === specs.length) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.on('exit', (code) => {
        if (got.length < specs.length) {
          clearTimeout(timer);
          reject(new Error(`the egress listener exited (${code}): ${stderr.trim()}`));
        }
      });
    });
  } catch (err) {
    for (const l of got) (l.server ?? l.udp).close();
    child.kill('SIGKILL');
    throw err;
  }
  return got;
}
