import { BUILTIN_TEMPLATES } from '../images/builtin.js';
import { builtinLayerIds } from '../images/builtin-layers.js';
import type { ImageServices } from '../images/index.js';
import type { Store } from '../store/types/index.js';

/**
 * Removes layers that nothing references: no template of any organization, no live sandbox (a
 * stopped one still mounts its layers on start), no snapshot, no imported or pulled image, no built-in recipe.
 * Skipped while a build runs, since its fresh layers are not referenced until it finishes.
 */
export async function collectGarbage(store: Store, images: Pick<ImageServices, 'layers' | 'images'>): Promise<string[]> {
  if ((await store.builds.unfinished()).length > 0) return [];
  // Every built-in's layers, those still building included (not yet in any template row).
  const keep = new Set<string>(builtinLayerIds(BUILTIN_TEMPLATES).values());
  for (const id of await images.images.referencedLayers()) keep.add(id);
  for (const s of await store.sandboxes.live()) for (const l of s.layers) keep.add(l);
  // A snapshot mounts its template's layers below its own, whatever became of the template.
  for (const l of await store.snapshots.referencedLayers()) keep.add(l);
  const orgs = await store.orgs.list();
  const seen = new Set<string>();
  for (const orgId of ['', ...orgs.map((o) => o.id)]) {
    for (const t of await store.templates.list(orgId)) {
      if (seen.has(t.id)) continue;
      seen.add(t.id);
      for (const l of t.layers) keep.add(l);
    }
  }
  const removed: string[] = [];
  for (const id of await images.layers.list()) {
    if (keep.has(id)) continue;
    await images.layers.remove(id);
    removed.push(id);
  }
  return removed;
}
