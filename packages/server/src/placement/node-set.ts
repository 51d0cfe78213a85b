import { ServiceError } from '@sandboxd/protocol';
import type { LocalNode } from '../node/local-node.js';
import type { Node } from '../node/types.js';
import type { Candidate } from './choose.js';

/**
 * The nodes placement holds: the one machine of the all-in-one daemon (FixedNodes), or the nodes of
 * a cluster's registry (RegisteredNodes). Placement itself (placement.ts) is the same over both.
 */
export interface NodeSet {
  /** Whether its nodes have capacities to place within (then the store's commitments are read for each take). */
  readonly bounded: boolean;
  /** Begins what keeps the set current (reads of the registry); resolves once it is first read. */
  start(): Promise<void>;
  /**
   * The nodes that may take a new sandbox now (up and active), read again when stale; `fresh`:
   * read again now unless just read (a take that ran out of nodes: one may be back since).
   */
  candidates(fresh?: boolean): Promise<Candidate[]>;
  /**
   * The node `nodeId` as a Node whose every call reaches it while it is up, and fails with
   * NODE_UNAVAILABLE when it is away or has left (at once when its lease runs out during the call).
   */
  node(nodeId: string): Node;
  /** This process asked `nodeId` for a sandbox of warm key `key`: one of the ready ones it reported is counted off. */
  noteTaken(nodeId: string, key: string): void;
  /** Whether the node answers as last seen (a listing says which sandboxes cannot be served now). */
  up(nodeId: string): boolean;
  /** The nodes that answer now, each as node(). */
  upNodes(): Promise<Node[]>;
  /** Sandboxes this process holds on each node and the store does not record yet, so that no node collects them as no one's. */
  claim(owner: string, byNode: ReadonlyMap<string, string[]>, ttlSeconds: number): Promise<void>;
  /** Ready sandboxes the nodes' warm pools hold and boot now, all keys together (the metrics). */
  warm(): { ready: number; booting: number };
  /** Calls `listener` when a node is first seen lost (its lease ran out, or it left). */
  onLost(listener: (nodeId: string) => void): void;
  /** Watches every node's OOM kills (told with the node that reported them); returns the function that stops it. */
  watchOom(onKill: (id: string, kills: number, nodeId: string) => void): () => void;
  close(): Promise<void>;
}

/**
 * The nodes of this process: the all-in-one daemon's one machine. They are always up and take
 * every sandbox (no capacity bound: the organizations' quotas are the bound); nothing collects
 * their sandboxes behind the store's back, so nothing needs claiming. One machine's rows all name
 * it, even under an earlier host name: with one node, every node id is that node.
 */
export class FixedNodes implements NodeSet {
  readonly bounded = false;
  private readonly byId: Map<string, LocalNode>;

  constructor(private readonly nodes: LocalNode[]) {
    if (nodes.length === 0) throw new Error('FixedNodes needs a node');
    this.byId = new Map(nodes.map((n) => [n.id, n]));
  }

  async start(): Promise<void> {}

  async candidates(): Promise<Candidate[]> {
    return this.nodes.map((n) => ({ id: n.id, ready: (key: string) => n.readyByKey()[key] ?? 0 }));
  }

  node(nodeId: string): Node {
    const n = this.byId.get(nodeId) ?? (this.nodes.length === 1 ? this.nodes[0] : undefined);
    if (!n) throw new ServiceError('NODE_UNAVAILABLE', `node ${nodeId} is not one of this service's`, { node: nodeId });
    return n;
  }

  /** Its ready counts are read live. */
  noteTaken(): void {}

  up(): boolean {
    return true;
  }

  async upNodes(): Promise<Node[]> {
    return [...this.nodes];
  }

  async claim(): Promise<void> {}

  /** This process's own nodes are never lost. */
  onLost(): void {}

  warm(): { ready: number; booting: number } {
    let ready = 0;
    let booting = 0;
    for (const n of this.nodes) {
      const w = n.warmStats();
      ready += w.ready;
      booting += w.booting;
    }
    return { ready, booting };
  }

  watchOom(onKill: (id: string, kills: number, nodeId: string) => void): () => void {
    const stops = this.nodes.map((n) => n.watchOom((id, kills) => onKill(id, kills, n.id)));
    return () => stops.forEach((stop) => stop());
  }

  async close(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.close()));
  }
}
