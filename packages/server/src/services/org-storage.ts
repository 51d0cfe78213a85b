import { BUILTIN_TEMPLATES } from '../images/builtin.js';
import { builtinLayerIds } from '../images/builtin-layers.js';
import type { SandboxRow, Store } from '../store/types/index.js';

/** What an organization causes to be stored, in bytes (GET /v1/account/limits, the metrics). */
export interface StorageUse {
  /** What its sandboxes' disks hold now (allocated blocks of their images; 0 where not known here). */
  sandboxDisksHeldBytes: number;
  /** What its snapshots, forks and the sandboxes and templates made from them keep in snapshot layers. */
  snapshotsBytes: number;
  /** Layers its own templates' steps made (not the bases they start from, nor the built-ins'). */
  templatesBytes: number;
  /** Uploaded files its uploads reference, each content once (and uploads under way). */
  uploadsBytes: number;
  /** Its volumes' whole size_gb (a volume may grow to it). */
  volumesBytes: number;
  /** snapshots + templates + uploads + volumes: what counts in max_total_disk_gb beside the sandboxes' disk_gb. */
  storedBytes: number;
}

export interface OrgStorageDeps {
  store: Store;
  /** Bytes of the organization's snapshot layers (services/snapshots storage). */
  snapshotsBytes: (orgId: string) => Promise<number>;
  /** Size of a template layer (its meta), or undefined when it is no layer of the template store. */
  layerBytes: (layerId: string) => Promise<number | undefined>;
  /** Layers of operator-imported or pulled images: shared bases, counted for no organization. */
  imageLayers: () => Promise<Set<string>>;
  /** What a sandbox's disk holds (absent: not on this machine). */
  diskHeld?: (row: SandboxRow) => Promise<number>;
}

/**
 * Per-organization accounting of storage: everything it causes to be kept. A sandbox's disk counts
 * in max_total_disk_gb by its disk_gb (what it may grow to, QuotaService); the rest by what it
 * stores, read here. Uploads under way count from their admission (`claimUpload`) to their end.
 */
export class OrgStorage {
  private readonly layerSizes = new Map<string, number>();
  private readonly uploading = new Map<string, number>();
  private readonly builtinLayers = new Set(builtinLayerIds(BUILTIN_TEMPLATES).values());
  /** The last reading of each organization's stored bytes (uploads under way apart). */
  private readonly readings = new Map<string, { at: number; bytes: number }>();

  constructor(private readonly d: OrgStorageDeps) {}

  /**
   * snapshots + templates + uploads (with those under way), the part of max_total_disk_gb beyond
   * disk_gb. `maxAgeMs`: a reading that recent will do (a create's admission: the stored bytes
   * change by uploads, whose own admission and end are counted at once, and by snapshots and
   * builds, checked fresh); 0 reads now.
   */
  async storedBytes(orgId: string, maxAgeMs = 0): Promise<number> {
    const now = Date.now();
    const last = this.readings.get(orgId);
    let bytes: number;
    if (last && now - last.at <= maxAgeMs) bytes = last.bytes;
    else {
      const [snapshots, templates, uploads, volumes] = await Promise.all([this.d.snapshotsBytes(orgId), this.templatesBytes(orgId), this.d.store.uploads.bytesForOrg(orgId), this.volumesBytes(orgId)]);
      bytes = snapshots + templates + uploads + volumes;
      if (this.readings.size > 4096) this.readings.clear();
      this.readings.set(orgId, { at: now, bytes });
    }
    return bytes + (this.uploading.get(orgId) ?? 0);
  }

  /** `disks: false`: without what the sandboxes' disks hold (a stat of each: not for every scrape). */
  async use(orgId: string, opts: { disks?: boolean } = {}): Promise<StorageUse> {
    const [snapshotsBytes, templatesBytes, uploaded, sandboxDisksHeldBytes, volumesBytes] = await Promise.all([
      this.d.snapshotsBytes(orgId),
      this.templatesBytes(orgId),
      this.d.store.uploads.bytesForOrg(orgId),
      opts.disks === false ? 0 : this.disksHeld(orgId),
      this.volumesBytes(orgId),
    ]);
    const uploadsBytes = uploaded + (this.uploading.get(orgId) ?? 0);
    return { sandboxDisksHeldBytes, snapshotsBytes, templatesBytes, uploadsBytes, volumesBytes, storedBytes: snapshotsBytes + templatesBytes + uploadsBytes + volumesBytes };
  }

  /** Counts `bytes` of an upload under way for the organization until the returned function is called. */
  holdUpload(orgId: string, bytes: number): () => void {
    this.uploading.set(orgId, (this.uploading.get(orgId) ?? 0) + bytes);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      // Its row (if it was kept) is in the next reading, taken now.
      this.readings.delete(orgId);
      const left = (this.uploading.get(orgId) ?? 0) - bytes;
      if (left > 0) this.uploading.set(orgId, left);
      else this.uploading.delete(orgId);
    };
  }

  private async volumesBytes(orgId: string): Promise<number> {
    return (await this.d.store.volumes.sizeGbForOrg(orgId)) * 1024 ** 3;
  }

  private async templatesBytes(orgId: string): Promise<number> {
    const ids = new Set<string>();
    for (const t of await this.d.store.templates.list(orgId)) if (t.orgId === orgId) for (const l of t.layers) ids.add(l);
    if (ids.size === 0) return 0;
    const shared = await this.d.imageLayers();
    let total = 0;
    for (const id of ids) {
      if (this.builtinLayers.has(id) || shared.has(id)) continue;
      let size = this.layerSizes.get(id);
      if (size === undefined) {
        size = await this.d.layerBytes(id);
        // A snapshot layer (a promoted template's) is the snapshot storage's, counted there.
        if (size === undefined) continue;
        this.layerSizes.set(id, size);
      }
      total += size;
    }
    return total;
  }

  private async disksHeld(orgId: string): Promise<number> {
    const held = this.d.diskHeld;
    if (!held) return 0;
    const rows = (await this.d.store.sandboxes.live()).filter((r) => r.orgId === orgId);
    const sizes = await Promise.all(rows.map((r) => held(r).catch(() => 0)));
    return sizes.reduce((a, b) => a + b, 0);
  }
}
