import type { Agent } from '../context.js';
import type { ProcessTable } from './processes.js';
import type { SandboxUsers } from './users.js';
import type { PolledWatchers } from './watcher.js';

/** What E2B's services share: the agent's parts plus the state of E2B's own API. */
export interface EnvdDeps {
  agent: Pick<Agent, 'config' | 'envStore' | 'helperPath'>;
  users: SandboxUsers;
  processes: ProcessTable;
  watchers: PolledWatchers;
}
