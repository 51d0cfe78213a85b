import { ServiceError } from '@sandboxd/protocol';
import { bearer, type ClusterSigner } from '../runtime/cluster-auth.js';

/** Control's side of the nodes' registry (http/routes/internal-nodes.ts): whose credential a call carries. */
export class NodeRegistryAuth {
  constructor(private readonly signer: Pick<ClusterSigner, 'checkNodeCredential'>) {}

  /** The node `id` if the `Authorization` header carries its registry credential; 401 or 403 otherwise. */
  async authorize(authorization: string | string[] | undefined, id: string): Promise<string> {
    const named = await this.signer.checkNodeCredential(bearer(authorization));
    if (named !== id) throw new ServiceError('PERMISSION_DENIED', `this credential is node ${named}'s, not node ${id}'s`);
    return id;
  }
}
