import { EventEmitter } from 'node:events';
import type { SandboxEventKind } from '@sandboxd/protocol';

export interface SandboxEventMessage {
  kind: SandboxEventKind;
  orgId: string;
  data: { id: string; status: string; at: string; reason?: string };
}

/** In-process lifecycle event bus feeding the SSE endpoints. */
export class EventBus {
  private emitter = new EventEmitter();
  constructor() {
    this.emitter.setMaxListeners(0);
  }
  publish(msg: SandboxEventMessage): void {
    this.emitter.emit('event', msg);
  }
  subscribe(fn: (msg: SandboxEventMessage) => void): () => void {
    this.emitter.on('event', fn);
    return () => this.emitter.off('event', fn);
  }
}
