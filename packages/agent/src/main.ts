import { chmodSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { createAgent } from './app.js';
import { loadConfig } from './config.js';
import { sayListening, serveRelays } from './handover.js';
import { logLine } from './log.js';
import { setAgentV8Flags } from './v8-flags.js';

function main(): void {
  // A small young generation, compaction on full collections, no optimising compilers: the memory
  // of an agent in every sandbox (see v8-flags.ts).
  setAgentV8Flags();
  // agent.cjs and what ships beside it (sbx-helper, sbx_run.py) live in one directory.
  const config = loadConfig(process.env, dirname(resolve(process.argv[1] ?? '.')));
  // SANDBOXD_* variables are the agent's own: nothing started from here may see them.
  for (const key of Object.keys(process.env)) if (key.startsWith('SANDBOXD_')) delete process.env[key];
  // The malloc tunables the runtime sets for the agent itself are not for user programs.
  if (process.env.GLIBC_TUNABLES?.startsWith('glibc.malloc.mmap_threshold=65536:')) delete process.env.GLIBC_TUNABLES;
  const { server } = createAgent(config);
  server.once('listening', () => logLine(`listening, ${Math.round(performance.now())} ms after the process started`));
  // The runtime creates the listening socket on the host (at a path the sandbox never sees) and
  // passes it as this fd (SANDBOXD_AGENT_LISTEN_FD); a socket path is the fallback.
  if (config.listenFd !== null) {
    // Started by the first responder: what it accepted early arrives on its relays; once this
    // listens, it stops accepting.
    serveRelays(server, config.relayFds);
    server.listen({ fd: config.listenFd }, () => sayListening(config.readyFd));
  } else {
    mkdirSync(dirname(config.socketPath), { recursive: true });
    rmSync(config.socketPath, { force: true });
    server.listen(config.socketPath, () => {
      // The host side connects as root of the host, which maps to nobody here; let it in.
      chmodSync(config.socketPath, 0o666);
    });
  }
  // The agent must outlive any one bad request: PID 1 stops the sandbox when the agent exits.
  process.on('uncaughtException', (err) => logLine(`uncaught: ${err.stack ?? err}`));
  process.on('unhandledRejection', (err) => logLine(`unhandled: ${(err as Error)?.stack ?? err}`));
  const shutdown = (sig: string) => {
    logLine(`${sig}: shutting down`);
    server.close(() => process.exit(0));
  };
  process.on('exit', (code) => logLine(`exit ${code}`));
  process.on('SIGTERM', () => shutdown('SIGTERM'));
  process.on('SIGINT', () => shutdown('SIGINT'));
}

main();
