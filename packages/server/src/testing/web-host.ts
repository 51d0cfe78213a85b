import { spawn } from 'node:child_process';
import { proc, procOk } from '../runtime/proc.js';

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
