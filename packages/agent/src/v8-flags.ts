import { setFlagsFromString } from 'node:v8';

/**
 * The V8 flags the agent runs with, set at its start (main.ts).
 *
 * Memory of an agent in every sandbox: V8 grows its young generation up to 16 MiB under a steady
 * request rate and keeps it until idle for half a minute; the agent's garbage is short-lived and
 * small, so 1 MiB serves as well. Compacting on full collections returns the old-generation pages
 * a burst of requests leaves fragmented (see IdleCollector). The agent waits on processes and
 * sockets; optimising compilers buy it nothing but their memory (code, and malloc arenas of the
 * background compiler threads that are never returned).
 */
export const AGENT_V8_FLAGS = ['--semi-space-growth-factor=1', '--compact-on-every-full-gc', '--no-opt'] as const;

export function setAgentV8Flags(): void {
  for (const flag of AGENT_V8_FLAGS) setFlagsFromString(flag);
}
