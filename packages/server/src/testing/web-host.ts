import { spawn } from 'node:child_process';
import { get } from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import type { CrunRuntimeOptions } from '../runtime/context.js';
import { proc, procOk } from '../runtime/proc.js';
import { baseLayer } from './fixtures.js';
import { createTestRuntime, testSpec, type TestRuntime } from './runtime-fixtures.js';

/**
 * Web servers at public-looking addresses, for egress tests: a network namespace behind a veth from
 * the host, host routes (/32) for its addresses, and a Node program run in it (`node -e script`,
 * with `env`) that prints a line once it listens. A sandbox's packets to those addresses take the
 * real path (bridge, nftables, the egress proxy, NAT).
 */
export interface WebHost {
  /** Stops the program, removes the routes and the netns (and so the veth); safe to call twice. */
  close: () => Promise<void>;
}

/** `netns` and `veth` (at most 15 characters) are the test's own names; `link` is the third octet of the veth's 169.254.<link>.0/30. */
export async function startWebHost(opts: { netns: string; veth: string; link: number; addresses: string[]; script: string; env?: Record<string, string> }): Promise<WebHost> {
  const { netns, veth, link, addresses } = opts;
  let server: ReturnType<typeof spawn> | undefined;
  const close = async () => {
    if (server && server.exitCode === null && server.signalCode === null) server.kill('SIGKILL');
    for (const a of addresses) await proc('ip', ['route', 'del', `${a}/32`]);
    await proc('ip', ['netns', 'del', netns]);
    await proc('ip', ['link', 'del', veth]);
  };
  try {
    await procOk('ip', ['-batch', '-'], {
      input: [`netns add ${netns}`, `link add ${veth} type veth peer name eth0 netns ${netns}`, `addr add 169.254.${link}.1/30 dev ${veth}`, `link set ${veth} up`].join('\n') + '\n',
    });
    await procOk('ip', ['-n', netns, '-batch', '-'], {
      input: ['link set lo up', 'link set eth0 up', `addr add 169.254.${link}.2/30 dev eth0`, ...addresses.map((a) => `addr add ${a}/32 dev lo`), `route add default via 169.254.${link}.1`].join('\n') + '\n',
    });
    for (const a of addresses) await procOk('ip', ['route', 'replace', `${a}/32`, 'via', `169.254.${link}.2`]);
    const child = spawn('ip', ['netns', 'exec', netns, process.execPath, '-e', opts.script], { stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, ...opts.env } });
    server = child;
    await new Promise<void>((resolve, reject) => {
      child.stdout!.once('data', () => resolve());
      child.once('exit', (c) => reject(new Error(`the web servers exited (${c})`)));
    });
  } catch (err) {
    await close();
    throw err;
  }
  return { close };
}

/** A real ClientHello (Node's TLS client) naming `servername`: the first bytes it sends. */
export function clientHelloBytes(servername: string): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const srv = createServer((s) => {
      s.once('data', (d: Buffer) => {
        resolve(d);
        s.destroy();
        srv.close();
      });
    });
    srv.listen(0, '127.0.0.1', () => {
      const c = tlsConnect({ host: '127.0.0.1', port: (srv.address() as AddressInfo).port, servername, rejectUnauthorized: false });
      c.on('error', () => undefined);
    });
    srv.on('error', reject);
  });
}

/** The body of a GET from the host (a fresh connection each time). */
export function getText(url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    get(url, { agent: false }, (res) => {
      let b = '';
      res.setEncoding('utf8').on('data', (c: string) => (b += c));
      res.on('end', () => resolve(b));
    }).on('error', reject);
  });
}

/**
 * The set-up egress tests share: web servers (startWebHost), a test runtime whose egress proxy
 * resolves names with `resolve`, and one sandbox with internet access. `t` may be replaced by the
 * test (a restarted runtime): close() tears down whatever it holds then.
 */
export interface EgressLab {
  t: TestRuntime;
  id: string;
  /** bash -c inside the sandbox: its stdout. */
  bash: (script: string) => Promise<string>;
  /** Writes a file inside the sandbox. */
  putFile: (path: string, data: Buffer | string) => Promise<void>;
  close: () => Promise<void>;
}

export async function startEgressLab(opts: Parameters<typeof startWebHost>[0] & { id: string; resolve: (name: string) => Promise<string[]>; runtime?: Partial<CrunRuntimeOptions> }): Promise<EgressLab> {
  const web = await startWebHost(opts);
  let lab: EgressLab | undefined;
  try {
    const t = await createTestRuntime({ egressResolve: opts.resolve, ...opts.runtime });
    lab = {
      t,
      id: opts.id,
      bash: async (script) => (await lab!.t.rt.exec(opts.id, ['bash', '-c', script])).stdout,
      putFile: async (path, data) => {
        await lab!.t.rt.exec(opts.id, ['sh', '-c', `base64 -d > ${path}`], { input: Buffer.from(data).toString('base64') + '\n' });
      },
      close: async () => {
        try {
          await lab!.t.rt.destroy(opts.id).catch(() => undefined);
          await lab!.t.teardown();
        } finally {
          await web.close();
        }
      },
    };
    await t.rt.create(testSpec(opts.id, [(await baseLayer()).path], { internetAccess: true }));
    return lab;
  } catch (err) {
    if (lab) await lab.close();
    else await web.close();
    throw err;
  }
}
