import type { Socket } from 'node:net';

/**
 * Opens a connection to a sandbox's agent, wherever it runs (a node's dialAgent: its unix socket
 * on this machine, or relayed by the node that holds it). Rejects with the socket's error, or a
 * ServiceError, when there is none within `timeoutMs`.
 */
export type AgentDial = (timeoutMs: number) => Promise<Socket>;

/** What the gateway needs to know about a sandbox to route a request to its agent (the services make it: routeOf). */
export interface RouteEntry {
  sandboxId: string;
  orgId: string;
  status: 'running' | 'paused' | 'stopped' | 'creating';
  /** How to reach its agent. */
  dial: AgentDial;
  port: number | null;
  /** A request to it while paused resumes it (auto_resume). */
  autoResume?: boolean;
  /** It has an idle timeout: requests to it count as its use. */
  tracksIdle?: boolean;
  /** Throws NODE_UNAVAILABLE while the node that holds it is away (its connections are dead, not slow). */
  reachable?: () => void;
  /** The node that holds it. */
  nodeId?: string;
}

/**
 * The gateway's routes as the lifecycle changes them (gateway/routes.ts RouteTable): a change made
 * here is the whole truth on one machine, and is told to the other replicas where they share a store.
 */
export interface Routes {
  set(entry: RouteEntry): void;
  setStatus(sandboxId: string, status: RouteEntry['status']): void;
  delete(sandboxId: string): void;
  get(sandboxId: string): RouteEntry | undefined;
  /** Another replica changed the sandbox: what is known of it here is read again when next used. */
  forget(sandboxId: string): void;
  /** Every route is read again when next used (messages from other replicas may have been lost). */
  forgetAll(): void;
}
