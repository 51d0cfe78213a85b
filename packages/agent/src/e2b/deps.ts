import type { Agent } from '../context.js';
import { ProcessTable } from './processes.js';
import { SandboxUsers } from './users.js';
import { PolledWatchers } from './watcher.js';

/** What E2B's routes share: the agent's parts plus the state of E2B's own API. */
export interface EnvdDeps {
  agent: Pick<Agent, 'config' | 'envStore' | 'helperPath'>;
  users: SandboxUsers;
  processes: ProcessTable;
  watchers: PolledWatchers;
}

/** E2B's state, made at the first request that needs it: a sandbox nobody reaches through E2B's clients allocates nothing. */
export function lazyDeps(agent: EnvdDeps['agent']): () => EnvdDeps {
  let deps: EnvdDeps | null = null;
  return () => (deps ??= { agent, users: new SandboxUsers(), processes: new ProcessTable(agent.helperPath), watchers: new PolledWatchers() });
}
