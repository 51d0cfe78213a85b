// Build step (build.mjs bundles and runs this with the Node that builds): writes envd.cjs's V8 code
// cache beside it. Made under the agent's V8 flags after running what a first E2B call runs (the
// bundle's top level, creating the handler, one process.Process/Start of /bin/true as E2B's client
// sends it), so that the cache holds the bytecode of all that: V8 compiles a function at its first
// call, and a cache made after running keeps what was compiled.
import { renameSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { setAgentV8Flags } from '../v8-flags.js';
import { compileEnvd, ENVD_CODE_CACHE } from './code-cache.js';
import type { EnvdDeps } from './deps.js';
import type { EnvdHandler } from './entry.js';

/** One Start through `handler` on a loopback port; resolves with the response body. */
async function startTrue(handler: EnvdHandler): Promise<string> {
  const server = createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    const json = Buffer.from(JSON.stringify({ process: { cmd: '/bin/true', args: [], envs: {} } }));
    const body = Buffer.concat([Buffer.from([0, 0, 0, 0, 0]), json]);
    body.writeUInt32BE(json.length, 1);
    return await new Promise<string>((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port: (server.address() as AddressInfo).port,
          method: 'POST',
          path: '/e2b/envd/process.Process/Start',
          headers: {
            'content-type': 'application/connect+json',
            'connect-protocol-version': '1',
            authorization: `Basic ${Buffer.from('root:').toString('base64')}`,
            'keepalive-ping-interval': '50',
          },
        },
        (res) => {
          let text = '';
          res.setEncoding('latin1');
          res.on('data', (c: string) => (text += c));
          res.on('end', () => resolve(text));
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  } finally {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  }
}

async function main(): Promise<void> {
  setAgentV8Flags();
  const dir = process.argv[2];
  if (!dir) throw new Error('usage: make-code-cache <agent bundle directory>');
  const compiled = compileEnvd(dir, require, false);
  // The handler needs of the agent only the environment for processes here.
  const agent = { config: { baseEnv: { PATH: '/usr/bin:/bin' } }, envStore: { all: () => ({}) }, helperPath: null } as unknown as EnvdDeps['agent'];
  const handler = compiled.run().createEnvd(agent);
  const answer = await startTrue(handler).catch((err: Error) => `failed: ${err.message}`);
  // Not fatal: the cache then holds less.
  if (!answer.includes('"end"')) console.warn(`agent build: the code cache's warm-up Start did not end as expected: ${answer.slice(0, 300)}`);
  const out = join(dir, ENVD_CODE_CACHE);
  writeFileSync(`${out}.tmp-${process.pid}`, compiled.script.createCachedData(), { mode: 0o644 });
  renameSync(`${out}.tmp-${process.pid}`, out);
}

void main();
