import type { SandboxResources } from '../runtime/types.js';
import type { NodeCapacity, SandboxUsage } from '../store/types/index.js';

/** A node that may take a new sandbox now, as placement weighs it. */
export interface Candidate {
  id: string;
  /** Absent: a node without a bound (one machine): it takes every sandbox, and no usage need be read. */
  capacity?: NodeCapacity;
  /** Ready sandboxes of each warm key in its pool (less those this process took since they were reported). */
  ready: (warmKey: string) => number;
  /** The layers it holds; undefined: not known yet (the preference then never holds it back). */
  layers?: ReadonlySet<string>;
}

/** How far past a node's cores and memory the limits of its sandboxes may add up. */
export interface Overcommit {
  cpu: number;
  memory: number;
}

/** A node that already holds a sandbox's layers is preferred while at most this much more committed (memory, as a fraction) than the least committed. */
export const LAYERS_PREFERENCE = 0.1;
/**
 * A node with a ready sandbox of the key asked counts as this much less committed (on top of the
 * layers', which it holds too), so it comes first among nodes about as committed. Small, because a
 * node's pool refills from the demand it sees: a large (or unbounded) preference sends create after
 * create to the node whose pool warmed first while the others, seeing none, never warm; a small one
 * lets the next node take a create (a cold one), whose pool then warms as well, and from then on
 * every create is served ready wherever it goes.
 */
export const WARM_PREFERENCE = 0.05;

const NONE: SandboxUsage = { active: 0, activeVcpu: 0, activeMemoryMb: 0, stopped: 0, diskGb: 0 };

/**
 * The node a new sandbox goes to, or undefined when none has room. Among the candidates with room
 * (cores and memory of what their live sandboxes hold, within the overcommit ratios; disk and the
 * number of sandboxes without), the one whose memory would be least committed, a node holding the
 * sandbox's layers counting as LAYERS_PREFERENCE less and one with a ready sandbox of its key as
 * WARM_PREFERENCE less again, then the one with fewer sandboxes, then by id. `usage` is what each
 * node's rows commit (what this process placed and has not recorded included).
 */
export function choose(candidates: Candidate[], usage: ReadonlyMap<string, SandboxUsage>, resources: SandboxResources, layerIds: string[], warmKey: string | undefined, over: Overcommit): string | undefined {
  let best: { id: string; score: number; sandboxes: number } | undefined;
  for (const c of candidates) {
    const u = usage.get(c.id) ?? NONE;
    const sandboxes = u.active + u.stopped + 1;
    let memory = 0;
    if (c.capacity) {
      const cap = c.capacity;
      if (u.activeVcpu + resources.vcpu > cap.vcpu * over.cpu || u.activeMemoryMb + resources.memoryMb > cap.memoryMb * over.memory || u.diskGb + resources.diskGb > cap.diskGb || sandboxes > cap.maxSandboxes) continue;
      memory = (u.activeMemoryMb + resources.memoryMb) / cap.memoryMb;
    }
    // A node that already holds the sandbox's layers boots it without fetching them first; one
    // with a ready sandbox of its key hands it over in milliseconds. Both preferences are bounded,
    // so the least committed node still wins when the others are well ahead, and the ready one
    // takes only as many as it reported ready (less what this process took since).
    const has = layerIds.length > 0 && (c.layers === undefined || layerIds.every((l) => c.layers!.has(l)));
    const warm = warmKey !== undefined && c.ready(warmKey) > 0;
    const score = memory - (has ? LAYERS_PREFERENCE : 0) - (warm ? WARM_PREFERENCE : 0);
    if (!best || score < best.score || (score === best.score && (sandboxes < best.sandboxes || (sandboxes === best.sandboxes && c.id < best.id)))) {
      best = { id: c.id, score, sandboxes };
    }
  }
  return best?.id;
}

/** `a` plus `b`, field by field. */
export function addUsage(a: SandboxUsage | undefined, b: SandboxUsage): SandboxUsage {
  const x = a ?? NONE;
  return { active: x.active + b.active, activeVcpu: x.activeVcpu + b.activeVcpu, activeMemoryMb: x.activeMemoryMb + b.activeMemoryMb, stopped: x.stopped + b.stopped, diskGb: x.diskGb + b.diskGb };
}
