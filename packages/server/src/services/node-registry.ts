import { ServiceError } from '@sandboxd/protocol';
import { bearer, NODE_CREDENTIAL_DAYS, NODE_CREDENTIAL_MAX_DAYS, type ClusterSigner, type NodeCredentialClaims } from '../runtime/cluster-auth.js';
import type { NodeRegistration, NodeRepo, NodeRow } from '../store/types/index.js';

const DAY_SECONDS = 86_400;

/**
 * Control's side of the nodes' registry (http/routes/internal-nodes.ts): whose credential a call
 * carries, and whether that node may still use it. An operator's removal of a node (`sandboxd nodes
 * remove`, recorded in the store) refuses every credential of it issued at or before the removal,
 * so that only one made afterwards (`sandboxd cluster node-credential`) lets it back.
 */
export class NodeRegistryAuth {
  /** Nodes whose credential without exp was logged already (once per node and process, not per heartbeat). */
  private readonly warned = new Set<string>();

  constructor(
    private readonly signer: Pick<ClusterSigner, 'checkNodeCredential' | 'nodeCredentialFor'>,
    private readonly nodes: Pick<NodeRepo, 'removedAt' | 'registerUnlessRemoved'>,
    private readonly log: (msg: string) => void = () => undefined,
  ) {}

  /** What node `id`'s credential in the `Authorization` header says; 401 or 403 unless it is one it may use. */
  async authorize(authorization: string | string[] | undefined, id: string): Promise<NodeCredentialClaims> {
    const claims = await this.signer.checkNodeCredential(bearer(authorization));
    if (claims.nodeId !== id) throw new ServiceError('PERMISSION_DENIED', `this credential is node ${claims.nodeId}'s, not node ${id}'s`);
    await this.refuseIfRemoved(claims);
    if (claims.expiresAt === undefined && !this.warned.has(id)) {
      this.warned.add(id);
      this.log(`warning: node ${id} uses a registry credential that never expires (made before credentials expired): the node replaces it with one that does at once; if it does not (an older sandboxd), make it a new one with \`sandboxd cluster node-credential ${id}\``);
    }
    return claims;
  }

  /** Registers the node whose credential this is, unless it was removed since the credential was made. */
  async register(claims: NodeCredentialClaims, reg: Omit<NodeRegistration, 'id'>, leaseMs: number): Promise<NodeRow> {
    const row = await this.nodes.registerUnlessRemoved({ ...reg, id: claims.nodeId }, leaseMs, isoOf(claims.issuedAt));
    if (row) return row;
    // Removed between authorize() and the write: the store has the time that refuses it now.
    await this.refuseIfRemoved(claims);
    throw new ServiceError('PERMISSION_DENIED', `node ${claims.nodeId} was removed from the cluster`);
  }

  /**
   * A new credential for the node whose (valid) credential this is, lasting as long as that one
   * did: the lifetime the operator chose (`--days`), within what a credential may last; one without
   * exp gets the default.
   */
  async renew(claims: NodeCredentialClaims): Promise<{ credential: string; expiresAt: string }> {
    const lifetime = claims.expiresAt === undefined ? NODE_CREDENTIAL_DAYS * DAY_SECONDS : Math.min(Math.max(claims.expiresAt - claims.issuedAt, DAY_SECONDS), NODE_CREDENTIAL_MAX_DAYS * DAY_SECONDS);
    const now = Date.now();
    const credential = await this.signer.nodeCredentialFor(claims.nodeId, { lifetimeSeconds: lifetime, now });
    // A removal recorded while this was signed refuses the new one too (it is of the same second or
    // earlier), but the node is told now rather than at its next call.
    await this.refuseIfRemoved(claims);
    return { credential, expiresAt: isoOf(Math.floor(now / 1000) + lifetime) };
  }

  private async refuseIfRemoved(claims: NodeCredentialClaims): Promise<void> {
    const removedAt = await this.nodes.removedAt(claims.nodeId);
    // The credential's time is in whole seconds: one of the removal's own second counts as before it
    // (`sandboxd nodes remove` returns only once that second is over).
    if (removedAt === undefined || claims.issuedAt * 1000 > Date.parse(removedAt)) return;
    const id = claims.nodeId;
    throw new ServiceError(
      'PERMISSION_DENIED',
      `node ${id} was removed from the cluster at ${removedAt} (\`sandboxd nodes remove\`), and this credential was made before (${isoOf(claims.issuedAt)}): to admit the node again, make it a new one (\`sandboxd cluster node-credential ${id} --out FILE\`), put it in its SANDBOXD_NODE_CREDENTIAL_FILE and restart it`,
      { node_removed_at: removedAt },
    );
  }
}

const isoOf = (seconds: number) => new Date(seconds * 1000).toISOString();
