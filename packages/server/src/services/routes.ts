import type { Socket } from 'node:net';
import { dialUnix } from '../runtime/agent-socket.js';

/**
 * Opens a connection to a sandbox's agent, wherever it runs (Runtime.dialAgent): its unix socket on
 * this machine, or relayed by the node that holds it. Rejects with the socket's error, or a
 * ServiceError, when there is none within `timeoutMs`.
 */
export type AgentDial = (timeoutMs: number) => Promise<Socket>;

/** The dialer of an agent socket on this machine (tests, and the runtime's own). */
export function unixDial(socketPath: string): AgentDial {
  return (timeoutMs) => dialUnix(socketPath, timeoutMs);
}

/** What the gateway needs to know about a sandbox to route a request to its agent. */
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
}

/** The lookup the gateway uses (in memory today; a shared table when the gateway is replicated). */
export class RouteTable {
  private byId = new Map<string, RouteEntry>();
  private byPort = new Map<number, string>();

  set(entry: RouteEntry): void {
    const old = this.byId.get(entry.sandboxId);
    if (old?.port != null && old.port !== entry.port) this.byPort.delete(old.port);
    this.byId.set(entry.sandboxId, entry);
    if (entry.port != null) this.byPort.set(entry.port, entry.sandboxId);
  }
  setStatus(sandboxId: string, status: RouteEntry['status']): void {
    const e = this.byId.get(sandboxId);
    if (e) e.status = status;
  }
  delete(sandboxId: string): void {
    const old = this.byId.get(sandboxId);
    if (old?.port != null) this.byPort.delete(old.port);
    this.byId.delete(sandboxId);
  }
  get(sandboxId: string): RouteEntry | undefined {
    return this.byId.get(sandboxId);
  }
  byGatewayPort(port: number): RouteEntry | undefined {
    const id = this.byPort.get(port);
    return id === undefined ? undefined : this.byId.get(id);
  }
}
