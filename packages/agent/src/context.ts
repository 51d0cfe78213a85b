import type { IncomingMessage, ServerResponse } from 'node:http';

/** What a route handler gets: the parsed request and helpers to answer. */
export interface RouteContext {
  req: IncomingMessage;
  res: ServerResponse;
  url: URL;
  requestId: string;
  /** Parsed JSON body (empty body → {}). Only read for methods that carry one. */
  body(): Promise<Record<string, unknown>>;
}

export type Handler = (ctx: RouteContext) => Promise<unknown> | unknown;

export interface Route {
  method: string;
  /** Exact path, or a prefix ending with '/*' whose rest is passed as ctx.url.pathname. */
  path: string;
  handler: Handler;
}

export interface AgentState {
  sandboxId: string;
  startedAt: Date;
  version: string;
  totalRequests: number;
  totalErrors: number;
  requestsByPath: Map<string, number>;
}
