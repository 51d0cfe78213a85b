import { bearer, type ClusterSigner } from '../runtime/cluster-auth.js';
import type { LayerContents } from '../images/layer-content.js';
import type { LayerRef, LayerSource } from '../runtime/types.js';

export interface LayerPublisherOptions {
  contents: LayerContents;
  signer: ClusterSigner;
  /** Where the nodes reach this replica's API (SANDBOXD_CONTROL_URL). */
  controlUrl: string;
}

/**
 * Control's layers, as the nodes get them: each sandbox's layers named by id, content digest and
 * size, fetched from this replica (which holds every template's layers in its own layers
 * directory, and whose digests are of its own copies) with a token signed for that node and layer.
 */
export class LayerPublisher implements LayerSource {
  constructor(private readonly o: LayerPublisherOptions) {}

  async refs(layerIds: string[], nodeId: string): Promise<LayerRef[]> {
    return Promise.all(
      layerIds.map(async (id) => {
        const d = await this.o.contents.of(id);
        return { id, digest: d.digest, bytes: d.bytes, url: `${this.o.controlUrl}/internal/v1/layers/${id}`, token: await this.o.signer.layerTokenFor(nodeId, id) };
      }),
    );
  }
}

/** Control's layer route's side (http/routes/internal-layers.ts): who may fetch, and what. */
export class LayerServer {
  constructor(
    readonly contents: LayerContents,
    private readonly signer: ClusterSigner,
  ) {}

  /** The node an `Authorization` header's layer token was signed for (AUTHENTICATION_ERROR otherwise). */
  authorize(authorization: string | string[] | undefined, layerId: string): Promise<string> {
    return this.signer.checkLayerToken(bearer(authorization), layerId);
  }

  has(layerId: string): Promise<boolean> {
    return this.contents.has(layerId);
  }

  open(layerId: string): ReturnType<LayerContents['open']> {
    return this.contents.open(layerId);
  }
}
