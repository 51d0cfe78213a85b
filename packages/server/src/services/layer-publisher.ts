import { ServiceError } from '@sandboxd/protocol';
import { bearer, type ClusterSigner } from '../runtime/cluster-auth.js';
import type { Store } from '../store/types/index.js';
import type { LayerContents } from '../images/layer-content.js';
import type { LayerRef, LayerSource } from '../runtime/types.js';

export interface LayerPublisherOptions {
  contents: LayerContents;
  signer: ClusterSigner;
  /** Where the nodes reach this replica's API (SANDBOXD_CONTROL_URL). */
  controlUrl: string;
  /**
   * Where replicas say which of them holds a layer one of them made (a snapshot's, a fork's): a
   * replica that lacks such a layer sends the node to the replica that has it.
   */
  kv?: Store['kv'];
  /** How long a layer's ref, once found, is sent without looking again (default 5 s). */
  refsFreshMs?: number;
}

const HOLDER_KEY = (id: string) => `layer-holder/${id}`;
/** How long a layer's ref, once found, is sent without looking again (LayerPublisher.refs). */
const REFS_FRESH_MS = 5000;
/** The most refs kept found at once (all are forgotten past it: they are looked for again). */
const REFS_KEPT = 4096;

/** A holder record read back from the store: checked, as anything read back is. */
function parseHolder(v: string | undefined): { url: string; digest: string; bytes: number } | undefined {
  if (!v) return undefined;
  try {
    const h = JSON.parse(v) as { url?: unknown; digest?: unknown; bytes?: unknown };
    if (typeof h.url !== 'string' || !/^https?:\/\/[^/?#\s]+$/.test(h.url)) return undefined;
    if (typeof h.digest !== 'string' || !/^sha256:[0-9a-f]{64}$/.test(h.digest) || typeof h.bytes !== 'number' || !Number.isSafeInteger(h.bytes) || h.bytes <= 0) return undefined;
    return { url: h.url, digest: h.digest, bytes: h.bytes };
  } catch {
    return undefined;
  }
}

/**
 * Control's layers, as the nodes get them: each sandbox's layers named by id, content digest and
 * size, fetched from this replica (which holds every template's layers in its own layers
 * directory, and whose digests are of its own copies) with a token signed for that node and layer.
 */
export class LayerPublisher implements LayerSource {
  constructor(private readonly o: LayerPublisherOptions) {}

  /**
   * Where each layer is served from, with its digest, as found lately: every create of a cluster
   * sends its layers' refs, and finding them (a look in each layers directory, the content record
   * read, or the store asked) took 2 to 5 ms of it. A layer's content never changes; it is looked
   * for again after REFS_FRESH_MS, so a layer removed since is not sent for longer than that.
   */
  private readonly found = new Map<string, { digest: string; bytes: number; url: string; at: number }>();

  async refs(layerIds: string[], nodeId: string): Promise<LayerRef[]> {
    return Promise.all(
      layerIds.map(async (id) => {
        const [token, where] = await Promise.all([this.o.signer.layerTokenFor(nodeId, id), this.whereIs(id)]);
        return { id, digest: where.digest, bytes: where.bytes, url: where.url, token };
      }),
    );
  }

  private async whereIs(id: string): Promise<{ digest: string; bytes: number; url: string }> {
    const now = Date.now();
    const hit = this.found.get(id);
    if (hit && now - hit.at < (this.o.refsFreshMs ?? REFS_FRESH_MS)) return hit;
    let where: { digest: string; bytes: number; url: string };
    if (!(await this.o.contents.has(id)) && this.o.kv) {
      // Made through another replica: the node fetches it from there (the cluster's key signs for every replica).
      const h = parseHolder(await this.o.kv.get(HOLDER_KEY(id)));
      if (!h) throw new ServiceError('INVALID_STATE', `layer ${id} is held by no control replica that said so`);
      where = { digest: h.digest, bytes: h.bytes, url: `${h.url}/internal/v1/layers/${id}` };
    } else {
      const d = await this.o.contents.of(id);
      where = { digest: d.digest, bytes: d.bytes, url: `${this.o.controlUrl}/internal/v1/layers/${id}` };
    }
    if (this.found.size >= REFS_KEPT) this.found.clear();
    this.found.set(id, { ...where, at: now });
    return where;
  }

  /** Says in the store that this replica holds layer `id` (its digest computed now, once). */
  async announce(id: string): Promise<void> {
    if (!this.o.kv) return;
    const d = await this.o.contents.of(id);
    await this.o.kv.set(HOLDER_KEY(id), JSON.stringify({ url: this.o.controlUrl, digest: d.digest, bytes: d.bytes }));
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
