import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/**
 * What uses each sandbox through the gateway: requests in flight (an execution may run for long:
 * the sandbox is in use), their responses, and open tunnels (WebSockets), which the HTTP server no
 * longer tracks. The sandbox's idle clock is touched as each use begins and ends.
 */
export class SandboxUses {
  private tunnels = new Map<string, Set<Socket>>();
  private inflight = new Map<string, number>();
  /** The responses of the requests in flight, to cut them (interrupt). */
  private responses = new Map<string, Set<ServerResponse>>();

  constructor(private touch: ((sandboxId: string) => void) | undefined) {}

  /** Cuts the sandbox's requests in flight and its WebSockets; new ones are served. */
  interrupt(sandboxId: string): void {
    for (const sock of this.tunnels.get(sandboxId) ?? []) sock.destroy();
    for (const res of this.responses.get(sandboxId) ?? []) res.destroy();
  }

  /** The sandboxes with a request in flight or a WebSocket open. */
  *busyIds(): Iterable<string> {
    for (const [id, n] of this.inflight) if (n > 0) yield id;
    for (const [id, set] of this.tunnels) if (set.size > 0 && !this.inflight.get(id)) yield id;
  }

  /** A request is in flight to the sandbox, or a WebSocket to it is open. */
  busy(sandboxId: string): boolean {
    return (this.inflight.get(sandboxId) ?? 0) > 0 || (this.tunnels.get(sandboxId)?.size ?? 0) > 0;
  }

  /**
   * A request to the sandbox is in flight from the moment it is let through (authorize, in the same
   * step as its state check: an idle pause never freezes a sandbox under a request it let in)
   * until `end`; both are uses.
   */
  begin(sandboxId: string): void {
    this.touch?.(sandboxId);
    this.inflight.set(sandboxId, (this.inflight.get(sandboxId) ?? 0) + 1);
  }

  end(sandboxId: string): void {
    const n = (this.inflight.get(sandboxId) ?? 1) - 1;
    if (n > 0) this.inflight.set(sandboxId, n);
    else this.inflight.delete(sandboxId);
    this.touch?.(sandboxId);
  }

  /** The sandbox's responses in flight, as they are now. */
  responsesOf(sandboxId: string): ServerResponse[] {
    return [...(this.responses.get(sandboxId) ?? [])];
  }

  /** Cuts the sandbox's tunnels; `forget`: and stops tracking them (the sandbox is closed). */
  cutTunnels(sandboxId: string, forget = false): void {
    for (const sock of this.tunnels.get(sandboxId) ?? []) sock.destroy();
    if (forget) this.tunnels.delete(sandboxId);
  }

  /** The sandboxes with tunnels tracked. */
  tunnelIds(): Iterable<string> {
    return this.tunnels.keys();
  }

  /** The response of a request let through: in flight until it closes, and then the request's use ends. */
  holdResponse(sandboxId: string, res: ServerResponse): void {
    let open = this.responses.get(sandboxId);
    if (!open) this.responses.set(sandboxId, (open = new Set()));
    const mine = open;
    mine.add(res);
    res.once('close', () => {
      mine.delete(res);
      if (mine.size === 0 && this.responses.get(sandboxId) === mine) this.responses.delete(sandboxId);
      this.end(sandboxId);
    });
  }

  /**
   * An upgraded connection (a terminal, a stream) is a use of the sandbox for as long as it is
   * open, with its connection upstream once made; `release` runs when it closes.
   */
  holdTunnel(sandboxId: string, socket: Socket, release: () => void): { onUpstream: (upstream: Socket) => void; onClose: (upstream: Socket | undefined) => void } {
    this.touch?.(sandboxId);
    let set = this.tunnels.get(sandboxId);
    if (!set) this.tunnels.set(sandboxId, (set = new Set()));
    const tunnelSet = set;
    tunnelSet.add(socket);
    return {
      onUpstream: (upstream) => tunnelSet.add(upstream),
      onClose: (upstream) => {
        release();
        this.touch?.(sandboxId);
        tunnelSet.delete(socket);
        if (upstream) tunnelSet.delete(upstream);
        if (tunnelSet.size === 0 && this.tunnels.get(sandboxId) === tunnelSet) this.tunnels.delete(sandboxId);
      },
    };
  }
}
