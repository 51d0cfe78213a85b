import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { AgentConfig } from './config.js';
import type { EnvStore } from './env/store.js';
import type { Executor } from './exec/executor.js';
import type { AgentStats } from './metrics/stats.js';

/** What a route handler gets: the parsed request and helpers to answer. */
export interface RouteContext {
  req: IncomingMessage;
  res: ServerResponse;
  url: URL;
  requestId: string;
  /** For '/*' routes: the decoded rest of the path after the prefix. */
  rest: string;
  /** Parsed JSON body (empty body → {}). Only read for methods that carry one. */
  body(): Promise<Record<string, unknown>>;
}

/** A handler returns the JSON body of a 200, or undefined when it answered itself (streams). */
export type Handler = (ctx: RouteContext) => Promise<unknown> | unknown;

export interface Route {
  method: string;
  /** Exact path, or a prefix ending with '/*' whose rest is passed as ctx.rest. */
  path: string;
  handler: Handler;
}

/** A WebSocket endpoint: handed the upgrade request once the path matched. */
export interface UpgradeRoute {
  path: string;
  handler: (req: IncomingMessage, socket: Duplex, head: Buffer, requestId: string) => void;
}

/** The agent's parts, shared by the routes. */
export interface Agent {
  version: string;
  config: AgentConfig;
  stats: AgentStats;
  envStore: EnvStore;
  executor: Executor;
  helperPath: string | null;
}
