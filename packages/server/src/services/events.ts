import { EventEmitter } from 'node:events';
import type { SandboxEventKind } from '@sandboxd/protocol';

export interface SandboxEventMessage {
  kind: SandboxEventKind;
  orgId: string;
  data: { id: string; status: string; at: string; reason?: string };
}

/**
 * The lifecycle event bus feeding the SSE endpoints. In a cluster (`relay` set) what is published
 * here also goes to the other replicas, and theirs arrive through `deliver`.
 */
export class EventBus {
  private emitter = new EventEmitter();
  relay?: (msg: SandboxEventMessage) => void;
  constructor() {
    this.emitter.setMaxListeners(0);
  }
  publish(msg: SandboxEventMessage): void {
    this.emitter.emit('event', msg);
    this.relay?.(msg);
  }
  /** An event another replica published: to this process's subscribers only. */
  deliver(msg: SandboxEventMessage): void {
    this.emitter.emit('event', msg);
  }
  subscribe(fn: (msg: SandboxEventMessage) => void): () => void {
    this.emitter.on('event', fn);
    return () => this.emitter.off('event', fn);
  }
}
